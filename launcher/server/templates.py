"""Chat templates: the model's own Jinja template, rendered in a sandbox, or a fallback by architecture.

Hugging Face templates expect `messages`, `tools`, `add_generation_prompt`, `bos_token`,
`eos_token` and the helpers `raise_exception`, `strftime_now` and a `tojson` that keeps
non-ASCII text. When a GGUF has no template we choose one from the architecture (and the EOS
token, which tells llama-3 from llama-2/mistral vocabularies); when none applies, loading fails
with a clear error instead of silently using a wrong format.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from launcher.core.errors import ModelFormatError
from launcher.engines.base import ModelInfo

ToolFormat = Literal["hermes", "llama3", "mistral", "harmony"]


class TemplateError(Exception):
    """The template refused the conversation (e.g. roles must alternate); a 400 for the client."""


_GEMMA = """{{ bos_token }}
{%- for message in messages -%}
{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}
<start_of_turn>{{ role }}
{{ message['content'] | trim }}<end_of_turn>
{% endfor -%}
{%- if add_generation_prompt -%}<start_of_turn>model
{% endif -%}"""

_LLAMA3 = """{{ bos_token }}
{%- for message in messages -%}
<|start_header_id|>{{ message['role'] }}<|end_header_id|>

{{ message['content'] | trim }}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>

{% endif -%}"""

_CHATML = """{%- for message in messages -%}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""

_MISTRAL = """{{ bos_token }}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}[INST] {{ message['content'] | trim }} [/INST]
{%- else -%} {{ message['content'] | trim }}{{ eos_token }}
{%- endif -%}
{%- endfor -%}"""

_PHI3 = """{%- for message in messages -%}
<|{{ message['role'] }}|>
{{ message['content'] }}<|end|>
{% endfor -%}
{%- if add_generation_prompt -%}<|assistant|>
{% endif -%}"""

# Fallback templates take only system/user/assistant text: `prepare_messages` folds tool calls
# and results into text first. `system` says whether the format has a system role.
_FALLBACKS: dict[str, tuple[str, bool]] = {
    "gemma": (_GEMMA, False),
    "llama3": (_LLAMA3, True),
    "chatml": (_CHATML, True),
    "mistral": (_MISTRAL, False),
    "phi3": (_PHI3, True),
}


def fallback_name(info: ModelInfo) -> str | None:
    """The fallback template family for a model without its own template, or None."""
    arch = info.architecture.lower()
    eos = (info.eos_token or "").strip()
    if arch.startswith("gemma"):
        return "gemma"
    if arch.startswith(("qwen", "internlm", "yi")) or eos == "<|im_end|>":
        return "chatml"
    if arch.startswith("phi3") or eos == "<|end|>":
        return "phi3"
    if eos in ("<|eot_id|>", "<|end_of_text|>"):
        return "llama3"
    if arch in ("llama", "mistral", "mistral3") and eos == "</s>":
        return "mistral"
    return None


def detect_tool_format(source: str) -> ToolFormat:
    """The tool-call syntax a template teaches its model (hermes when we inject our own instructions)."""
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|channel|>" in source and "to=functions" in source:
        return "harmony"
    if "<tool_call>" in source:
        return "hermes"
    if "<|python_tag|>" in source or ("<|start_header_id|>" in source and "parameters" in source):
        return "llama3"
    return "hermes"


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


TOOLS_SYSTEM_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


@dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template and what it can do."""

    source: str
    template: jinja2.Template
    fallback: str | None  # fallback family name, None for the model's own template
    supports_tools: bool
    supports_system: bool
    tool_format: ToolFormat
    bos_token: str
    eos_token: str

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for `messages` (OpenAI-shaped dicts), ending with the assistant's turn."""
        prepared = prepare_messages(self, messages, tools)
        try:
            return self.template.render(
                messages=prepared,
                tools=tools if (tools and self.supports_tools) else None,
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError:
            raise
        except jinja2.TemplateError as err:
            raise TemplateError(f"The model's chat template could not render this conversation: {err}") from err
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            raise TemplateError(f"The model's chat template failed on this conversation: {err}") from err


def load_template(info: ModelInfo) -> ChatTemplate:
    """The template for a loaded model; raises ModelFormatError when none fits."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    fallback: str | None = None
    supports_system = True
    if info.chat_template:
        source = info.chat_template
    else:
        fallback = fallback_name(info)
        if fallback is None:
            raise ModelFormatError(
                f"{info.id} has no chat template and its architecture ({info.architecture}) has no known "
                "fallback, so chat requests would use a wrong format. Use a GGUF that includes a chat "
                "template, or /v1/completions with your own prompt format."
            )
        source, supports_system = _FALLBACKS[fallback]
    try:
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise ModelFormatError(f"The chat template in {info.path} is not valid Jinja: {err}") from err
    supports_tools = fallback is None and "tools" in source and ("tool_call" in source or "tool" in source)
    return ChatTemplate(
        source=source,
        template=template,
        fallback=fallback,
        supports_tools=supports_tools,
        supports_system=supports_system,
        tool_format=detect_tool_format(source) if supports_tools else "hermes",
        bos_token=info.bos_token or "",
        eos_token=info.eos_token or "",
    )


def _text_tool_call(call: dict[str, Any]) -> str:
    function = call.get("function", call)
    body = {"name": function.get("name"), "arguments": function.get("arguments", {})}
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def _nine_char_id(call_id: str) -> str:
    digest = hashlib.sha256(call_id.encode()).digest()
    alphabet = string.ascii_letters + string.digits
    return "".join(alphabet[b % len(alphabet)] for b in digest[:9])


def _mistral_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mistral templates refuse call ids that are not 9 alphanumerics; map any client id onto one."""
    for message in messages:
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "id": _nine_char_id(str(call.get("id", "")))} for call in message["tool_calls"]
            ]
        if message.get("tool_call_id"):
            message["tool_call_id"] = _nine_char_id(str(message["tool_call_id"]))
    return messages


def fold_system_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One leading system message at most; later ones folded into the user's side of the conversation.

    Agents send instructions mid-conversation (Claude Code's `role: "system"` messages, Codex's
    later developer messages) while chat templates take a system prompt only first, or drop the
    rest. A later one joins the user turn before it (or becomes a user turn of its own), so it
    stays where the agent put it and the earlier turns, hence the cached prefix, do not change.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        message = dict(message)
        if message["role"] != "system":
            out.append(message)
            continue
        text = message.get("content") or ""
        if not out or (len(out) == 1 and out[0]["role"] == "system"):
            if out:
                out[0]["content"] = f"{out[0]['content']}\n\n{text}".strip("\n")
            else:
                out.append(message)
            continue
        folded = f"<system>\n{text}\n</system>"
        last = out[-1]
        if last["role"] == "user" and not last.get("tool_calls"):
            last["content"] = f"{last['content']}\n\n{folded}" if last.get("content") else folded
        else:
            out.append({"role": "user", "content": folded})
    return out


def prepare_messages(
    template: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Adapt the conversation to what the template can take.

    System messages after the first turn are folded into user turns (`fold_system_messages`).
    Templates without tool support get tool definitions in the system prompt, tool calls as
    `<tool_call>` text and tool results as user turns; templates without a system role get the
    system text at the top of the first user turn. Consecutive same-role turns are merged so
    strict templates (user/assistant must alternate) accept them.
    """
    out = fold_system_messages(messages)
    if template.supports_tools:
        return _mistral_call_ids(out) if template.tool_format == "mistral" else out
    system_parts = [m["content"] or "" for m in out if m["role"] == "system"]
    if tools:
        lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        system_parts.append(TOOLS_SYSTEM_PROMPT.format(tools=lines))
    turns: list[dict[str, Any]] = []
    for message in out:
        role = message["role"]
        if role == "system":
            continue
        content = message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = "\n".join(_text_tool_call(call) for call in message["tool_calls"])
            content = f"{content}\n{calls}".strip()
            role = "assistant"
        elif role == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
            role = "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})
    system = "\n\n".join(part for part in system_parts if part)
    if system:
        if template.supports_system:
            turns.insert(0, {"role": "system", "content": system})
        elif turns and turns[0]["role"] == "user":
            turns[0]["content"] = system + "\n\n" + turns[0]["content"]
        else:
            turns.insert(0, {"role": "user", "content": system})
    return turns
