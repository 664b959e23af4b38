"""Every tool-call family an agent meets, from its model's real chat template (tests/server/chat_templates):
the template shows the family's calls, the server tells the family from the template, the model's calls
come back as structured calls whole and streamed, a started call that is none comes back as text, and
the call grammar writes calls the parser reads, started by a trigger that prose does not set off."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from launcher.server.core.chat import normalize_history
from launcher.server.core.templates import TOOLS_SYSTEM_PROMPT, ToolFormat, detect_tool_format, load_template
from launcher.server.core.toolcalls import (
    ParsedToolCall,
    StreamingToolParser,
    TextPiece,
    lazy_tool_constraint,
    parse_tool_calls,
    tool_constraint,
)
from tests.server.fake_model import fake_info

CHAT_TEMPLATES = Path(__file__).parent / "chat_templates"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the project",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]

# An agent's turn after a tool result: the model called get_weather and got its answer. (The server hands
# templates a call's missing text as "", as chat.normalize_history does; it also types the history.)
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]

PARIS = ("get_weather", {"city": "Paris", "days": 2})
ROME = ("get_weather", {"city": "Rome"})
PROSE = "Let me look that up."

_DS = {"calls": "<｜tool▁calls▁begin｜>", "call": "<｜tool▁call▁begin｜>", "sep": "<｜tool▁sep｜>"}
_DS_END = {"call": "<｜tool▁call▁end｜>", "calls": "<｜tool▁calls▁end｜>"}


@dataclass(frozen=True)
class Family:
    fmt: ToolFormat
    templates: tuple[str, ...]  # real templates of models that write this family's calls
    history_call: str  # how the templates write the earlier get_weather call
    reply: str  # a model's reply: PROSE (where the family allows text first), then its call(s)
    calls: tuple[tuple[str, dict[str, Any]], ...]  # the calls in `reply`
    not_a_call: str  # a reply that starts a call and turns into prose


FAMILIES = [
    Family(
        "hermes",
        ("Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "ibm-granite-granite-4.0.jinja"),
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>',
        f"{PROSE}\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
        (PARIS, ROME),
        "<tool_call> is the tag I would use, but the answer is sunny.",
    ),
    Family(
        "qwen3_coder",
        ("Qwen3-Coder.jinja",),
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
        f"{PROSE}\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
        (PARIS, ROME),
        "<tool_call> is the tag I would use, but the answer is sunny.",
    ),
    Family(
        "deepseek_r1",
        (
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
            "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
            "llama-cpp-deepseek-r1.jinja",
        ),
        f'{_DS["call"]}function{_DS["sep"]}get_weather\n```json\n{{"city": "Paris", "days": 2}}\n```{_DS_END["call"]}',
        f"{PROSE}{_DS['calls']}"
        f'{_DS["call"]}function{_DS["sep"]}get_weather\n```json\n{{"city": "Paris", "days": 2}}\n```{_DS_END["call"]}\n'
        f'{_DS["call"]}function{_DS["sep"]}get_weather\n```json\n{{"city": "Rome"}}\n```{_DS_END["call"]}'
        f"{_DS_END['calls']}",
        (PARIS, ROME),
        f"{_DS['calls']} is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "deepseek_v31",
        ("deepseek-ai-DeepSeek-V3.1.jinja",),
        f'{_DS["calls"]}{_DS["call"]}get_weather{_DS["sep"]}{{"city": "Paris", "days": 2}}{_DS_END["call"]}'
        f"{_DS_END['calls']}",
        f"{PROSE}{_DS['calls']}"
        f'{_DS["call"]}get_weather{_DS["sep"]}{{"city": "Paris", "days": 2}}{_DS_END["call"]}'
        f'{_DS["call"]}get_weather{_DS["sep"]}{{"city": "Rome"}}{_DS_END["call"]}{_DS_END["calls"]}',
        (PARIS, ROME),
        f"{_DS['calls']}{_DS['call']}get_weather is what I would call, but the answer is sunny.",
    ),
    Family(
        "glm",
        ("GLM-4.6.jinja",),
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        f"{PROSE}\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n"
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>",
        (PARIS, ROME),
        "<tool_call> is the tag I would use, but the answer is sunny.",
    ),
    Family(
        "granite",
        ("ibm-granite-granite-3.3-2B-Instruct.jinja",),
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
        f"{PROSE}"
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
        (PARIS, ROME),
        "<|tool_call|> is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "phi4",
        ("microsoft-Phi-4-mini-instruct.jinja",),
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]<|/tool_call|>',
        f"{PROSE}"
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_weather", "arguments": {"city": "Rome"}}]<|/tool_call|>',
        (PARIS, ROME),
        "<|tool_call|> is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "kimi_k2",
        ("moonshotai-Kimi-K2.jinja", "Kimi-K2-Instruct.jinja"),
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>',
        f"{PROSE}<|tool_calls_section_begin|>"
        '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Paris", "days": 2}'
        '<|tool_call_end|><|tool_call_begin|>functions.get_weather:2<|tool_call_argument_begin|>{"city": "Rome"}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        (PARIS, ROME),
        "<|tool_calls_section_begin|> is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "mistral",
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja",),
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}',
        f"{PROSE}"
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
        (PARIS, ROME),
        "[TOOL_CALLS] is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "llama3",
        ("meta-llama-Llama-3.1-8B-Instruct.jinja",),
        '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
        (PARIS,),
        "<|python_tag|> is how a call would begin, but the answer is sunny.",
    ),
    Family(
        "harmony",
        ("openai-gpt-oss-120b.jinja",),
        'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "days": 2}<|call|>',
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 2}<|call|>',
        (PARIS,),
        "<|channel|>commentary to=functions.get_weather " + "and a long story after it " * 8,
    ),
]


def _by_template(families: list[Family]) -> list[tuple[Family, str]]:
    return [(family, name) for family in families for name in family.templates]


def _template(name: str) -> Any:
    return load_template(fake_info(chat_template=(CHAT_TEMPLATES / name).read_text(encoding="utf-8")))


def _structured(calls: list[ParsedToolCall]) -> list[tuple[str, Any]]:
    return [(call.name, json.loads(call.arguments)) for call in calls]


def _streamed(fmt: ToolFormat, text: str, tools: list[dict[str, Any]] | None = TOOLS) -> tuple[str, list[Any], str]:
    """(text, calls, text given out before the reply ended), feeding 1 to 3 characters at a time."""
    parser = StreamingToolParser(fmt, tools)
    events: list[TextPiece | ParsedToolCall] = []
    position, step = 0, 0
    while position < len(text):
        size = 1 + step % 3
        events.extend(parser.feed(text[position : position + size]))
        position, step = position + size, step + 1
    before_end = "".join(e.text for e in events if isinstance(e, TextPiece))
    events.extend(parser.finish())
    content = "".join(e.text for e in events if isinstance(e, TextPiece))
    return content, _structured([e for e in events if isinstance(e, ParsedToolCall)]), before_end


@pytest.mark.parametrize(("family", "name"), _by_template(FAMILIES), ids=lambda v: getattr(v, "fmt", v))
def test_the_real_template_shows_the_family_s_calls_and_is_told_apart(family: Family, name: str) -> None:
    template = _template(name)
    assert detect_tool_format(template.source) == family.fmt
    assert template.supports_tools and template.tool_format == family.fmt
    prompt = template.render(normalize_history(HISTORY), TOOLS)
    assert family.history_call in prompt, prompt
    assert "sunny" in prompt
    assert "read_file" in prompt, "the model is not shown the tools"


def test_gemma_3_has_no_tools_and_gets_hermes_instructions() -> None:
    template = load_template(
        fake_info(
            chat_template=(CHAT_TEMPLATES / "google-gemma-3-it.jinja").read_text(encoding="utf-8"),
            architecture="gemma3",
            bos_token="<bos>",
            eos_token="<eos>",
        )
    )
    assert not template.supports_tools and template.tool_format == "hermes"
    prompt = template.render(normalize_history(HISTORY), TOOLS)
    # Gemma 3's template puts the system text at the top of the first user turn
    assert prompt.startswith("<bos><start_of_turn>user\nBe brief.\n\n" + TOOLS_SYSTEM_PROMPT.split("{tools}")[0])
    assert '"name": "read_file"' in prompt
    assert (
        '<start_of_turn>model\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
        "</tool_call><end_of_turn>\n<start_of_turn>user\n<tool_response>\nsunny\n</tool_response>"
    ) in prompt
    assert prompt.endswith("<start_of_turn>model\n")


def test_templates_that_never_show_tools_get_them_with_a_call_in_their_own_syntax() -> None:
    prompt = _template("deepseek-ai-DeepSeek-V3.1.jinja").render(normalize_history(HISTORY), TOOLS)
    system = prompt.split("<｜User｜>")[0]
    assert '"name": "read_file"' in system
    example = (
        f'{_DS["calls"]}{_DS["call"]}function_name{_DS["sep"]}{{"arg": "value"}}{_DS_END["call"]}{_DS_END["calls"]}'
    )
    assert example in system


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_the_model_s_calls_are_parsed_whole_and_streamed(family: Family) -> None:
    content, calls = parse_tool_calls(family.fmt, family.reply, TOOLS)
    assert _structured(calls) == list(family.calls)
    streamed, streamed_calls, _ = _streamed(family.fmt, family.reply)
    assert streamed_calls == list(family.calls)
    if family.reply.startswith(PROSE):
        assert content.strip() == PROSE and streamed.strip() == PROSE
    else:
        assert content == "" and streamed == ""


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_a_started_call_that_turns_into_prose_comes_back_as_text_at_once(family: Family) -> None:
    content, calls = parse_tool_calls(family.fmt, family.not_a_call, TOOLS)
    assert calls == [] and content == family.not_a_call
    streamed, streamed_calls, before_end = _streamed(family.fmt, family.not_a_call)
    assert streamed_calls == [] and streamed == family.not_a_call
    assert len(before_end) >= len(family.not_a_call) - 12, "the prose was held back until the reply ended"


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm"])
def test_tagged_arguments_take_the_type_the_tool_s_schema_gives(fmt: ToolFormat) -> None:
    if fmt == "qwen3_coder":
        reply = (
            "<tool_call>\n<function=get_weather>\n<parameter=city>\n2049\n</parameter>\n"
            "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"
        )
    else:
        reply = (
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>2049</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>three</arg_value>\n</tool_call>"
        )
    # a string stays a string even when it reads as a number; text where a number belongs stays text
    _, calls = parse_tool_calls(fmt, reply, TOOLS)
    assert _structured(calls) == [("get_weather", {"city": "2049", "days": "three"})]
    # without the tools, what reads as JSON is JSON
    _, calls = parse_tool_calls(fmt, reply)
    assert _structured(calls) == [("get_weather", {"city": 2049, "days": "three"})]


def test_qwen3_coder_values_keep_their_inner_lines_and_code() -> None:
    code = 'def f():\n    return "<b>"\n'
    reply = f"<tool_call>\n<function=read_file>\n<parameter=path>\n{code}\n</parameter>\n</function>\n</tool_call>"
    _, calls = _streamed("qwen3_coder", reply)[0:2]
    assert calls == [("read_file", {"path": code})]


def test_a_qwen3_coder_call_followed_by_prose_without_its_end_tag_is_still_a_call() -> None:
    call = "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>"
    content, calls, _ = _streamed("qwen3_coder", call + "\nNow I wait for the file.")
    assert calls == [("read_file", {"path": "a.txt"})]
    assert content.strip() == "Now I wait for the file."


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm"])
def test_a_hermes_call_inside_a_tagged_family_s_tool_call_is_still_a_call(fmt: ToolFormat) -> None:
    """Qwen3-Coder and GLM share Hermes's <tool_call>; their models at times write Hermes JSON in it."""
    reply = (
        f'{PROSE}\n<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "Paris", "days": 2}}}}\n</tool_call>'
    )
    content, calls, _ = _streamed(fmt, reply)
    assert calls == [PARIS] and content.strip() == PROSE


def _written_by_grammar(constraint: Any, calls: tuple[tuple[str, dict[str, Any]], ...]) -> str:
    """The text a constrained model writes for `calls`: the constraint's literal text around each call's
    arguments, as JSON or as tagged parameters."""
    shapes = {shape.prefix_text: shape for shape in constraint.calls}
    parts = []
    for name, arguments in calls:
        (shape,) = [s for prefix, s in shapes.items() if name in prefix]
        if shape.params is None:
            body = json.dumps(arguments)
        else:
            body = "".join(
                shape.params[0].replace("{name}", key)
                + (value if isinstance(value, str) else json.dumps(value))
                + shape.params[1]
                for key, value in arguments.items()
            )
        parts.append(shape.prefix_text + body + shape.suffix_text)
    return constraint.prefix_text + "\n".join(parts) + constraint.suffix_text


# gpt-oss's required call is constrained in hermes form (tests/server/test_toolcalls.py); its lazy grammar
# writes its own headers (tests/server/test_harmony.py)
@pytest.mark.parametrize("family", [f for f in FAMILIES if f.fmt != "harmony"], ids=lambda f: f.fmt)
def test_the_call_grammar_writes_calls_the_parser_reads_and_the_template_writes(family: Family) -> None:
    constraint, fmt = tool_constraint(family.fmt, TOOLS, parallel=True)
    assert fmt == family.fmt
    if constraint.kind != "tool_calls":
        # JSON families: a JSON schema (tests/server/test_toolcalls.py) between the template's own markers
        assert constraint.prefix_text.strip() in family.history_call
        assert constraint.suffix_text.strip() in family.history_call
        return
    assert [shape.schema for shape in constraint.calls] == [t["function"]["parameters"] for t in TOOLS]
    assert constraint.repeat
    text = _written_by_grammar(constraint, family.calls)
    _, calls = parse_tool_calls(fmt, text, TOOLS)
    assert _structured(calls) == list(family.calls)
    # the literal text the grammar forces is the template's own
    paris = constraint.calls[0]
    assert paris.prefix_text in family.history_call and paris.suffix_text in family.history_call
    if paris.params is not None:
        assert paris.params[0].replace("{name}", "days") + "2" + paris.params[1] in family.history_call
    single, _ = tool_constraint(family.fmt, TOOLS)
    assert not single.repeat, "tool_choice required asks for one call"


def grammar_start(constraint: Any, text: str) -> int | None:
    """Where the engines hand a lazy grammar this reply: the start of the first group of the first trigger
    that the text written so far sets off, looked for after each character (llama.cpp and
    launcher/engines/lazy_grammar.py search after each token, with these patterns, which mean the same
    in Python's re as in llama.cpp's ECMAScript std::regex)."""
    for end in range(1, len(text) + 1):
        for trigger in constraint.triggers:
            found = re.search(trigger, text[:end])
            if found is not None:
                return found.start(1)
    return None


def assert_the_grammar_takes_the_call(constraint: Any, text: str, call_at: int) -> None:
    """The grammar starts at the call at `call_at` (or inside its opening marker), and what the reply wrote
    from there is what the grammar writes: its literal opening, then the call's JSON or its tool's name."""
    start = grammar_start(constraint, text)
    assert start is not None and start >= call_at, (start, call_at)
    call = text[start:]
    assert call.startswith(constraint.prefix_text), call
    rest = call[len(constraint.prefix_text) :]
    if constraint.kind == "tool_calls":
        openings = [s.prefix_text.partition("get_weather") for s in constraint.calls if "get_weather" in s.prefix_text]
        assert any(rest.startswith(before + name) for before, name, _ in openings), rest
    else:
        assert rest.lstrip()[:1] in ("{", "["), rest


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_the_lazy_grammar_starts_at_the_call_and_not_at_prose(family: Family) -> None:
    constraint = lazy_tool_constraint(family.fmt, TOOLS, parallel=True, thinking="no")
    for trigger in constraint.triggers:
        assert not trigger.startswith(".*"), "std::regex would recurse once per character"
    assert_the_grammar_takes_the_call(constraint, family.reply, family.reply.index(family.reply.removeprefix(PROSE)))
    prose = "The weather tool says sunny; <tool> and [TOOL] are not calls, nor is a call_begin."
    assert grammar_start(constraint, prose) is None


_THOUGHTS = {
    # gpt-oss thinks in its analysis channel, which ends before the next message's header
    "harmony": "<|channel|>analysis<|message|>I could write {call} here, but first I think.<|end|><|start|>assistant",
}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_with_thinking_the_lazy_grammar_waits_for_the_end_of_the_thoughts(family: Family) -> None:
    constraint = lazy_tool_constraint(family.fmt, TOOLS, parallel=False, thinking="maybe")
    call = family.reply.removeprefix(PROSE).lstrip()
    thought = _THOUGHTS.get(family.fmt, "<think>I could write {call} here, but first I think.</think>\n")
    thought = thought.format(call=call[: len(call) // 2])
    assert_the_grammar_takes_the_call(constraint, thought + call, len(thought))


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        # a JSON answer opens the reply; it names no tool
        ("llama3", '{"name": "Paris", "country": "France"}'),
        ("llama3", '{"name": "browse", "parameters": {}}'),
        # a call's JSON after other text is no call (llama 3 writes bare calls alone)
        ("llama3", 'Here: {"name": "get_weather", "parameters": {"city": "Paris"}}'),
        # a preamble to the user, then the answer
        ("harmony", "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>final"),
        # gpt-oss naming the call in its thoughts, and in its answer
        (
            "harmony",
            "<|channel|>analysis<|message|>I call <|channel|>commentary to=functions.get_weather<|end|>",
        ),
        ("harmony", "<|channel|>final<|message|>I would write to=functions.get_weather for that."),
        # gpt-oss's built-in browser, which the server does not run (server/core/harmony.py)
        ("harmony", '<|channel|>commentary to=browser.search <|constrain|>json<|message|>{"query": "x"}'),
    ],
)
def test_the_lazy_grammar_of_llama3_and_gpt_oss_leaves_what_is_no_call_to_the_request_s_tools_free(
    fmt: ToolFormat, reply: str
) -> None:
    constraint = lazy_tool_constraint(fmt, TOOLS, parallel=True, thinking="no")
    assert grammar_start(constraint, reply) is None


def test_a_bare_llama3_call_opening_the_reply_is_constrained_from_its_first_brace() -> None:
    constraint = lazy_tool_constraint("llama3", TOOLS, parallel=True, thinking="no")
    reply = '\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'
    assert grammar_start(constraint, reply) == 1
    jsonschema.validate(json.loads(reply), constraint.schema)
    assert _structured(parse_tool_calls("llama3", reply, TOOLS)[1]) == [PARIS]
