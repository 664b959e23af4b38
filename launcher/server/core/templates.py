"""Chat templates: the model's own Jinja template, rendered in a sandbox, or a fallback by architecture.

Hugging Face templates expect `messages`, `tools`, `add_generation_prompt`, `bos_token`,
`eos_token` and the helpers `raise_exception`, `strftime_now` and a `tojson` that keeps
non-ASCII text. When a GGUF has no template we choose one from the architecture (and the EOS
token, which tells llama-3 from llama-2/mistral vocabularies); when none applies, loading fails
with a clear error instead of silently using a wrong format.

Tools meet templates in four ways. Most describe the tools and write earlier calls in the
model's own syntax: both go to the template as they are. Some write earlier calls but never
show the tools (DeepSeek's): the tools, and a call as the template itself writes one, go into
the system prompt. Some show the tools but drop earlier calls (Granite 3.3, Phi-4-mini): the
calls go into the assistant's text in the model's syntax. A template with no tools at all
(Gemma 3) gets our Hermes-style instructions, calls and results as text.
"""

from __future__ import annotations

import copy
import hashlib
import json
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from launcher.core.errors import ModelFormatError
from launcher.engines.base import ModelInfo
from launcher.server.core.messages import ChatMessage

ToolFormat = Literal[
    "hermes",  # Qwen 2.5/3, Hermes, Granite 4: <tool_call>{"name", "arguments"}</tool_call>
    "llama3",  # Llama 3.x: {"name", "parameters"}, bare or after <|python_tag|>
    "mistral",  # [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...}
    "harmony",  # gpt-oss: <|channel|>commentary to=functions.NAME ... <|message|>{...}<|call|>
    "qwen3_coder",  # Qwen3-Coder, Qwen3.5: <tool_call><function=NAME><parameter=P>value</parameter>...
    "deepseek_r1",  # DeepSeek V3 / R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json {...} ```
    "deepseek_v31",  # DeepSeek V3.1: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
    "glm",  # GLM 4.5+: <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
    "granite",  # Granite 3.x: <|tool_call|>[{"name", "arguments"}, ...]
    "phi4",  # Phi-4-mini: <|tool_call|>[{"name", "arguments"}, ...]<|/tool_call|>
    "kimi_k2",  # Kimi K2: <|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}, in a section
]

CALL_LIST_WRAP: dict[ToolFormat, tuple[str, str]] = {
    "granite": ("<|tool_call|>", ""),
    "phi4": ("<|tool_call|>", "<|/tool_call|>"),
}
"""The families that write their calls as one JSON list between two markers: the markers."""


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


def _tool_family(source: str) -> ToolFormat | None:
    """The call syntax a template's text names, or None when it names none.

    Order matters where families share a tag: GLM and Qwen3-Coder write `<tool_call>` like
    Hermes, so their own tags (`<arg_key>`, `<function=`) are looked for first."""
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|channel|>" in source:
        return "harmony"  # gpt-oss's template writes `to=` and `functions.NAME` apart
    if "<|tool_calls_section_begin|>" in source:
        return "kimi_k2"
    if "<｜tool▁calls▁begin｜>" in source:
        return "deepseek_r1" if "```json" in source else "deepseek_v31"
    if "<arg_key>" in source:
        return "glm"
    if "<tool_call>" in source and "<function=" in source and "<parameter=" in source:
        return "qwen3_coder"
    if "<tool_call>" in source:
        return "hermes"
    if "<|tool_call|>" in source:
        return "granite"
    if "message['tools']" in source and "<|tool|>" in source:
        return "phi4"  # tools ride on the system message; the model answers with <|tool_call|>
    if "<|python_tag|>" in source or ("<|start_header_id|>" in source and "parameters" in source):
        return "llama3"
    return None


def detect_tool_format(source: str) -> ToolFormat:
    """The tool-call syntax a template teaches its model (hermes when we inject our own instructions)."""
    return _tool_family(source) or "hermes"


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _listed(value: Any) -> Any:
    """What `json` cannot write itself: the generators of Jinja filters (`tools | map(...)`) as lists."""
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False, **_: Any) -> str:
    # **_: templates pass Python's own options too (GLM's `tojson(ensure_ascii=False)`)
    return json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys, default=_listed
    )


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


TOOLS_LIST_PROMPT = """# Tools

You may call one or more of these functions to assist with the user query:
{tools}"""
"""For templates that write earlier calls but never show the tools: the tools, then (CALL_EXAMPLE_PROMPT) a
call as the template itself writes one, so the model sees its own syntax, not ours."""

CALL_EXAMPLE_PROMPT = """

A call is written like this example (a function name and its arguments):
{example}"""


@dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template and what it can do."""

    source: str
    template: jinja2.Template
    fallback: str | None  # fallback family name, None for the model's own template
    supports_tools: bool  # tools and earlier calls go to the template (its own call syntax)
    supports_system: bool
    tool_format: ToolFormat
    bos_token: str
    eos_token: str
    describes_tools: bool = True  # the template shows the tools (else TOOLS_LIST_PROMPT does)
    renders_calls: bool = True  # the template writes earlier calls (else they join the assistant's text)
    call_example: str = ""  # a call as the template writes it, for TOOLS_LIST_PROMPT
    string_arguments: bool = False  # earlier calls' arguments as JSON text (the template adds them to text)
    null_call_content: bool = False  # a call's empty text as None (the template writes calls only then)

    def render(self, messages: Sequence[ChatMessage], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for `messages`, ending with the assistant's turn. The one place typed messages
        become the dicts a Hugging Face template reads (ChatMessage.as_dict)."""
        prepared = prepare_messages(self, [message.as_dict() for message in messages], tools)
        return self.render_prepared(prepared, tools if (tools and self.supports_tools) else None)

    def render_prepared(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, add_generation_prompt: bool = True
    ) -> str:
        """The template over messages already in its shape. The template gets copies: the sandbox lets it
        change lists it builds itself (Kimi K2's queue of call ids), so it must not reach ours."""
        try:
            return self.template.render(
                messages=copy.deepcopy(messages),
                tools=copy.deepcopy(tools),
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError:
            raise
        except jinja2.TemplateError as err:
            raise TemplateError(f"The model's chat template could not render this conversation: {err}") from err
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            raise TemplateError(f"The model's chat template failed on this conversation: {err}") from err


_EXAMPLE_USER = {"role": "user", "content": "Look it up."}


def _example_call(arguments: Any, content: str | None) -> dict[str, Any]:
    call = {"id": "call_0", "type": "function", "function": {"name": "function_name", "arguments": arguments}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def _call_message_shape(template: ChatTemplate) -> tuple[bool, bool]:
    """How an earlier call must reach the template for it to write the call: (arguments as JSON text,
    empty text as None). Most take the arguments as an object and the text as a string; some add the
    arguments to text (DeepSeek-R1-Distill-Llama's `'\\n' + tool['function']['arguments']`) or write
    calls only for a message whose content is None. (False, False) when no shape shows the call."""
    for string_arguments, null_content in ((False, False), (True, False), (False, True), (True, True)):
        arguments: Any = '{"arg": "value"}' if string_arguments else {"arg": "value"}
        call = _example_call(arguments, None if null_content else "")
        try:
            text = template.render_prepared([_EXAMPLE_USER, call], None, add_generation_prompt=False)
        except TemplateError:
            continue
        if "function_name" in text:
            return string_arguments, null_content
    return False, False


def _call_example(template: ChatTemplate) -> str:
    """A call as `template` writes it in an earlier turn: what a conversation with one call adds to the
    same conversation ending at the assistant's turn (its end-of-turn token taken off). Empty if the
    template cannot show one."""
    arguments: Any = '{"arg": "value"}' if template.string_arguments else {"arg": "value"}
    call = _example_call(arguments, None if template.null_call_content else "")
    try:
        before = template.render_prepared([_EXAMPLE_USER], None)
        after = template.render_prepared([_EXAMPLE_USER, call], None, add_generation_prompt=False)
    except TemplateError:
        return ""
    shared = 0
    while shared < min(len(before), len(after)) and before[shared] == after[shared]:
        shared += 1
    # the two may share the first character of different tags (`<｜Assistant｜><think>` and
    # `<｜Assistant｜><｜tool▁calls▁begin｜>`): the example starts at its tag's start
    opened = max(after.rfind("<", 0, shared), after.rfind("[", 0, shared))
    if opened > max(after.rfind(">", 0, shared), after.rfind("]", 0, shared)):
        shared = opened
    example = after[shared:].strip()
    if template.eos_token:
        example = example.removesuffix(template.eos_token).strip()
    return example if "function_name" in example else ""


def load_template(info: ModelInfo) -> ChatTemplate:
    """The template for a loaded model; raises ModelFormatError when none fits."""
    # Not the immutable sandbox: real templates append to lists of their own (Kimi K2). Python's
    # internals stay out of reach, and `render_prepared` hands the template copies of our data.
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
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
    family = _tool_family(source)
    describes_tools = fallback is None and "tools" in source
    renders_calls = fallback is None and "tool_calls" in source
    supports_tools = describes_tools or (renders_calls and family is not None)
    chat_template = ChatTemplate(
        source=source,
        template=template,
        fallback=fallback,
        supports_tools=supports_tools,
        supports_system=supports_system,
        tool_format=(family or "hermes") if supports_tools else "hermes",
        bos_token=info.bos_token or "",
        eos_token=info.eos_token or "",
        describes_tools=describes_tools,
        renders_calls=renders_calls,
    )
    if renders_calls:
        string_arguments, null_content = _call_message_shape(chat_template)
        chat_template = replace(chat_template, string_arguments=string_arguments, null_call_content=null_content)
    if supports_tools and not describes_tools:
        chat_template = replace(chat_template, call_example=_call_example(chat_template))
    return chat_template


def _text_tool_call(call: dict[str, Any]) -> str:
    function = call.get("function", call)
    body = {"name": function.get("name"), "arguments": function.get("arguments", {})}
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def _text_tool_calls(fmt: ToolFormat, calls: list[dict[str, Any]]) -> str:
    """Earlier calls as text in the model's own syntax (Hermes-style where the family has no list form)."""
    wrap = CALL_LIST_WRAP.get(fmt)
    if wrap is None:
        return "\n".join(_text_tool_call(call) for call in calls)
    bodies = [
        {"name": call.get("function", call).get("name"), "arguments": call.get("function", call).get("arguments", {})}
        for call in calls
    ]
    return wrap[0] + json.dumps(bodies, ensure_ascii=False) + wrap[1]


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
        return _native_tool_messages(template, out, tools)
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
            calls = _text_tool_calls("hermes", message["tool_calls"])
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


def _with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """`text` at the end of the leading system message (one is added when there is none)."""
    if messages and messages[0]["role"] == "system":
        first = messages[0].get("content") or ""
        return [{**messages[0], "content": f"{first}\n\n{text}" if first else text}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _with_string_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or isinstance(function.get("arguments"), str):
        return call
    arguments = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
    return {**call, "function": {**function, "arguments": arguments}}


def _native_tool_messages(
    template: ChatTemplate, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The conversation for a template that knows its model's tool calls, with what it leaves out put in."""
    fmt = template.tool_format
    if fmt == "mistral":
        messages = _mistral_call_ids(messages)
    if template.null_call_content:
        messages = [{**m, "content": m.get("content") or None} if m.get("tool_calls") else m for m in messages]
    if template.string_arguments:
        messages = [
            {**m, "tool_calls": [_with_string_arguments(call) for call in m["tool_calls"]]}
            if m.get("tool_calls")
            else m
            for m in messages
        ]
    if not template.renders_calls:
        messages = [
            {
                **m,
                "content": "\n".join(p for p in (m.get("content") or "", _text_tool_calls(fmt, m["tool_calls"])) if p),
            }
            if m["role"] == "assistant" and m.get("tool_calls")
            else m
            for m in messages
        ]
        messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
    if tools and fmt == "phi4":
        # Phi-4-mini reads its tools from the system message's `tools` (a JSON list of functions)
        if not messages or messages[0]["role"] != "system":
            messages = [{"role": "system", "content": ""}, *messages]
        listed = json.dumps([tool.get("function", tool) for tool in tools], ensure_ascii=False)
        messages = [{**messages[0], "tools": listed}, *messages[1:]]
    elif tools and not template.describes_tools:
        lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        prompt = TOOLS_LIST_PROMPT.format(tools=lines)
        if template.call_example:
            prompt += CALL_EXAMPLE_PROMPT.format(example=template.call_example)
        messages = _with_system_text(messages, prompt)
    return messages
