"""Chat templates: the model's own (sandboxed), fallbacks by architecture, tools for templates without them."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.core.errors import ModelFormatError
from launcher.server.core.chat import normalize_history
from launcher.server.core.messages import ChatMessage
from launcher.server.core.templates import TemplateError, load_template
from tests.fixtures.models import TINY_CHAT_TEMPLATE
from tests.server.fake_model import fake_info

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_gemma_without_template_gets_gemma_turns() -> None:
    template = load_template(fake_info(chat_template=None, architecture="gemma3", bos_token="<bos>", eos_token="<eos>"))
    text = template.render(
        normalize_history([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    )
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_llama3_vocabulary_without_template_gets_llama3_headers() -> None:
    template = load_template(
        fake_info(chat_template=None, architecture="llama", bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    )
    text = template.render(normalize_history([{"role": "user", "content": "Hi"}]))
    assert text.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_unknown_architecture_without_template_fails_at_load() -> None:
    with pytest.raises(ModelFormatError, match="no chat template"):
        load_template(fake_info(chat_template=None, architecture="rwkv7", eos_token="</s>"))


def test_template_exception_is_a_template_error() -> None:
    template = load_template(fake_info(chat_template="{{ raise_exception('roles must alternate') }}"))
    with pytest.raises(TemplateError, match="roles must alternate"):
        template.render(normalize_history([{"role": "user", "content": "x"}]))


def test_sandbox_blocks_python_internals() -> None:
    template = load_template(fake_info(chat_template="{{ messages.__class__.__mro__ }}"))
    with pytest.raises(TemplateError):
        template.render(normalize_history([{"role": "user", "content": "x"}]))


def test_tools_go_into_the_system_prompt_when_the_template_has_no_tool_support() -> None:
    template = load_template(fake_info())
    assert not template.supports_tools and template.tool_format == "hermes"
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = template.render(normalize_history(history), [WEATHER_TOOL])
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_templates_with_tool_support_get_tools_natively() -> None:
    source = (
        "{% if tools %}TOOLS:{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.role }}:"
        "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.arguments | tojson }}"
        "{% endfor %}{% else %}{{ m.content }}{% endif %};{% endfor %}"
    )
    template = load_template(fake_info(chat_template=source))
    assert template.supports_tools and template.tool_format == "hermes"
    text = template.render(normalize_history([{"role": "user", "content": "é"}]), [WEATHER_TOOL])
    assert text.startswith('TOOLS:[{"type": "function"') and "user:é;" in text


def test_mistral_templates_get_nine_character_call_ids() -> None:
    source = (
        "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
        "{% if c.id|length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
        "{% endif %}[TOOL_CALLS]{{ c.id }}{% endfor %}{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.tool_call_id }}"
        "{% else %}{{ m.content }}{% endif %}{% endfor %}{% if tools %}[AVAILABLE_TOOLS]{% endif %}"
    )
    template = load_template(fake_info(chat_template=source))
    assert template.tool_format == "mistral"
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_abcdef0123456789", "type": "function", "function": {"name": "f", "arguments": {}}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_abcdef0123456789", "content": "ok"},
    ]
    text = template.render(normalize_history(history), [WEATHER_TOOL])
    call_id = text.split("[TOOL_CALLS]")[1][:9]
    assert call_id.isalnum() and f"[TOOL_RESULTS]{call_id}" in text


def test_a_system_message_mid_conversation_joins_the_user_turn_before_it() -> None:
    """Claude Code sends its environment as a `system` message after the user's prompt."""
    template = load_template(fake_info(chat_template=TINY_CHAT_TEMPLATE))  # shows only messages[0] as system
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Reply with hello"},
        {"role": "system", "content": "# Environment\ncwd: /work"},
    ]
    text = template.render(normalize_history(history))
    assert text.startswith("<|im_start|>system\nYou are an agent.\n\nBe brief.<|im_end|>")
    assert "<|im_start|>user\nReply with hello\n\n<system>\n# Environment\ncwd: /work\n</system><|im_end|>" in text
    later = template.render(
        normalize_history([*history, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}])
    )
    assert later.startswith(text.removesuffix("<|im_start|>assistant\n")), "an earlier turn changed: cache lost"


def test_a_system_message_after_the_assistant_becomes_a_user_turn() -> None:
    gemma = load_template(fake_info(chat_template=None, architecture="gemma3", bos_token="<bos>", eos_token="<eos>"))
    text = gemma.render(
        normalize_history(
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "system", "content": "Now answer in French."},
            ]
        )
    )
    assert text.endswith(
        "<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>user\n<system>\nNow answer in French.\n</system><end_of_turn>\n<start_of_turn>model\n"
    )


def test_a_template_may_change_lists_of_its_own_but_not_the_conversation() -> None:
    """Kimi K2's template keeps a queue of call ids with append/pop; what it changes is a copy."""
    source = (
        "{% set ids = [] %}{% set _ = ids.append(1) %}{% set _ = messages.append(messages[0]) %}{{ messages | length }}"
    )
    template = load_template(fake_info(chat_template=source))
    history = [ChatMessage(role="user", content="hi")]
    assert template.render(history) == template.render(history) == "2"
    assert history == [ChatMessage(role="user", content="hi")]
