"""Every tool-call family's call, through each engine's real constrained path and the reply parser.

The families are tests/server/test_tool_families.py's: the text a family's models write for a call (from
their real templates) and the calls in it. Here that text goes through the constraints the server builds
(`tool_constraint` for `tool_choice: required`, `lazy_tool_constraint` for `auto`) as each engine compiles
and enforces them, over a tiny model's real vocabulary:

- llama.cpp: the GBNF from `compile_constraint`, in llama.cpp's own grammar sampler (its lazy form, on the
  constraint's triggers, for the lazy constraint), over the tiny GGUF's vocabulary;
- MLX: the llguidance Lark from its `GrammarCompiler`, through the logits processor the engine runs
  (`LazyGrammarProcessor` for the lazy constraint), over the tiny MLX model's tokenizer;
- ExLlama: the Lark from `grammar_for` in its `GrammarMatcher` (`LazyGrammarMatcher`), over the tiny HF
  model's tokenizer. No GPU: this is the grammar side of both ExLlama engines.

A text is accepted when the engine lets a model write exactly its tokens and then end. The accepted call
reads back as the family's calls, whole and streamed; a broken call (an argument of the wrong type, a
required one left out) is refused. Then one real generation per family on llama.cpp, forced to call.

Special tokens: the tiny vocabularies hold ChatML, `<tool_call>`, `</tool_call>` and `[TOOL_CALLS]` as
added tokens, but not the other families' markers (DeepSeek's `<｜tool▁calls▁begin｜>`, Kimi's
`<|tool_call_begin|>`, Granite's and Phi-4's `<|tool_call|>`, GLM's `<arg_value>`...), which their real
tokenizers hold as single added tokens. Without them a marker is plain text on every engine: llama.cpp
matches tokens by their text anyway (control tokens too), and llguidance's literals are then plain
strings. That checks the literal text, but not what the real models meet on llguidance, which treats an
added token as special: a string literal cannot match it, only a token reference can (call_lark.py). So
the llguidance engines also run over their tokenizer with every family's markers added as tokens
("+markers"): there a marker is the one token a model writes, and the grammar must reference it by id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.llamacpp._native import llama
from launcher.engines.llamacpp._sampling import compile_constraint
from launcher.engines.llamacpp.model import LlamaCppModel
from launcher.server.core.templates import ToolFormat
from launcher.server.core.toolcalls import lazy_tool_constraint, parse_tool_calls, tool_constraint
from tests.engines.llamacpp.support import LazyGrammarProbe, load
from tests.engines.support import run
from tests.server.test_tool_families import FAMILIES, PROSE, TOOLS, Family, _streamed, _structured

Accepts = Callable[[Constraint, str], bool]
"""Whether an engine lets a model write exactly this text under this constraint, and then end."""

BY_FORMAT = {family.fmt: family for family in FAMILIES}
LAZY = [family for family in FAMILIES if lazy_tool_constraint(family.fmt, TOOLS, parallel=True, thinking="no")]

# Every family's call markers that real tokenizers hold as single added tokens.
MARKERS = (
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|tool_call|>",
    "<|/tool_call|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
END = "<|im_end|>"  # the tiny models' end of generation

# ---- the engines' grammars --------------------------------------------------------------------------------


class _LlamaCppGrammar(LazyGrammarProbe):
    """llama.cpp's grammar sampler over the tiny GGUF's vocabulary, run as the engine runs it: from a
    trigger on when the constraint has triggers (engines/llamacpp/_lazy.py). A control token's text is
    read as that token (`[TOOL_CALLS]` is one token, as a model writes it); text the vocabulary has no
    token for is its bytes, which the grammar matches as text."""

    def __call__(self, constraint: Constraint, text: str) -> bool:
        grammar = compile_constraint(constraint)
        if constraint.triggers:
            return self.refused_at(grammar, constraint.triggers, text) is None
        return self.accepts(grammar, text)


def _with_markers(tokenizer: Any) -> Any:
    """A `tokenizers.Tokenizer` with every family's markers added as tokens (those it lacks)."""
    from tokenizers import AddedToken

    tokenizer.add_special_tokens([AddedToken(marker, special=True, normalized=False) for marker in MARKERS])
    return tokenizer


def _mlx_grammar(model_dir: Path, markers: bool) -> Accepts:
    """The MLX engine's grammar processors over the tiny MLX model's tokenizer."""
    import mlx.core as mx
    from transformers import AutoTokenizer

    from launcher.engines.mlx._sampling import GrammarCompiler
    from launcher.engines.mlx._tokens import TokenizerAccess

    hf = AutoTokenizer.from_pretrained(str(model_dir))
    if markers:
        _with_markers(hf.backend_tokenizer)
    tokens = TokenizerAccess(hf)

    def encode(text: str) -> list[int]:
        return tokens.encode(text, add_special=False, parse_special=True)

    (end,) = encode(END)
    compiler = GrammarCompiler(hf, len(hf), [end])
    assert not markers or all(len(encode(marker)) == 1 for marker in MARKERS)

    def accepts(constraint: Constraint, text: str) -> bool:
        processor = compiler.processor(constraint, encode)
        output = [end]  # the processor's first call sees the prompt's last token, which is no output
        for token in [*encode(text), end]:
            logits = processor(mx.array(output), mx.zeros((1, len(hf))))
            if logits[0, token].item() == float("-inf"):
                return False
            output.append(token)
        return True

    return accepts


def _exllama_grammar(directory: Path, markers: bool) -> Accepts:
    """The ExLlama engines' grammar matchers over the tiny HF model's tokenizer."""
    from tokenizers import Tokenizer

    from launcher.engines.exllama_common._constraints import checked_triggers, grammar_for
    from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, LazyGrammarMatcher, load_ll_tokenizer
    from tests.engines.exllama.tiny_hf import build_tokenizer_json

    tokenizer = Tokenizer.from_str(build_tokenizer_json())
    if markers:
        _with_markers(tokenizer)
    directory.mkdir(parents=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    end_id = tokenizer.token_to_id(END)
    assert end_id is not None
    end = (end_id,)
    added = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    table = load_ll_tokenizer(directory, end)
    assert not markers or all(len(tokenizer.encode(marker, add_special_tokens=False).ids) == 1 for marker in MARKERS)

    def accepts(constraint: Constraint, text: str) -> bool:
        matcher = GrammarMatcher(table, grammar_for(constraint, added), tokenizer.get_vocab_size(), end)
        watched = LazyGrammarMatcher(matcher, checked_triggers(constraint)) if constraint.triggers else matcher
        for token in [*tokenizer.encode(text, add_special_tokens=False).ids, end[0]]:
            allowed = watched.allowed()  # None: no constraint (a lazy one waiting for its trigger)
            if allowed is not None and token not in allowed[0]:
                return False
            watched.consume(token)
        return True

    return accepts


ENGINES = ("llama.cpp", "mlx", "mlx+markers", "exllama", "exllama+markers")


@pytest.fixture(scope="module")
def llamacpp_grammar(tiny_gguf: Path) -> Iterator[_LlamaCppGrammar]:
    llama()  # the engine's own setup of llama.cpp: its log handler reads the lazy sampler's lines, which
    # name a token's bytes (half a character, where the vocabulary spells one byte by byte)
    grammar = _LlamaCppGrammar(tiny_gguf)
    yield grammar
    grammar.close()


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Accepts]:
    """(name, accepts) for one engine's grammar."""
    name: str = request.param
    if name == "llama.cpp":
        grammar: _LlamaCppGrammar = request.getfixturevalue("llamacpp_grammar")
        return name, grammar
    if name.startswith("mlx"):
        return name, _mlx_grammar(request.getfixturevalue("tiny_mlx_model"), name.endswith("+markers"))
    return name, _exllama_grammar(tmp_path_factory.mktemp("exllama") / "tokenizer", name.endswith("+markers"))


# ---- the texts --------------------------------------------------------------------------------------------


def _kimi_numbered_as_the_grammar(text: str) -> str:
    """Kimi K2 numbers calls across the conversation (`functions.get_weather:1`, `:2` after an earlier call);
    its grammar's literal text says `:0` for every call (a literal says one number; the parser does not read
    it, and the server gives calls their own ids). A constrained Kimi model writes `:0`: so does this text."""
    return re.sub(r"(functions\.\w+):\d+", r"\1:0", text)


def forced_text(family: Family) -> str:
    """What a model of `family` writes under `tool_constraint` (no text before the call)."""
    _, fmt = tool_constraint(family.fmt, TOOLS)
    if fmt != family.fmt:  # constrained in another family's form (harmony in hermes's): its one call
        return BY_FORMAT[fmt].history_call
    if family.fmt == "llama3":  # the constrained call is the bare JSON, as its template writes calls
        return family.history_call
    return _kimi_numbered_as_the_grammar(family.reply.removeprefix(PROSE).lstrip())


def lazy_text(family: Family) -> str:
    """The family's whole reply, prose first (where it has any): the lazy grammar lets the prose through,
    then the call. gpt-oss's `<|call|>` is its end-of-generation token, which ends the reply where the
    grammar is complete, as the tiny models' END does here: its grammar holds no `<|call|>`."""
    text = _kimi_numbered_as_the_grammar(family.reply)
    return text.removesuffix("<|call|>") if family.fmt == "harmony" else text


def from_the_trigger(constraint: Constraint, reply: str) -> str:
    """The reply from where the lazy grammar takes over. The engines search the text written so far with
    each trigger after each token (a trigger may say the match ends where the text does), and take over at
    the first match's first group: here after each character."""
    for end in range(1, len(reply) + 1):
        for trigger in constraint.triggers:
            match = re.search(trigger, reply[:end])
            if match:
                return reply[match.start(1) if match.lastindex else match.start() :]
    raise AssertionError(f"no trigger matches {reply!r}")


def arguments_text(fmt: ToolFormat, arguments: dict[str, Any]) -> str:
    """get_weather's arguments as `fmt`'s calls write them: tagged parameters (a string as raw text), or JSON."""
    constraint, _ = tool_constraint(fmt, TOOLS)
    params = constraint.calls[0].params if constraint.calls else None
    if params is None:
        return json.dumps(arguments)
    return "".join(
        params[0].replace("{name}", key) + (value if isinstance(value, str) else json.dumps(value)) + params[1]
        for key, value in arguments.items()
    )


BROKEN: dict[str, dict[str, Any]] = {
    "a wrong type": {"city": "Paris", "days": "two"},
    "a missing required argument": {"days": 2},
}


def with_arguments(fmt: ToolFormat, text: str, arguments: dict[str, Any]) -> str:
    """`text` with its Paris call's arguments replaced by `arguments`."""
    paris = arguments_text(fmt, {"city": "Paris", "days": 2})
    assert paris in text, (paris, text)
    return text.replace(paris, arguments_text(fmt, arguments), 1)


# ---- the grammars accept the families' calls, and refuse broken ones -------------------------------------


@pytest.mark.parametrize(
    "family",
    [pytest.param(f, id=f.fmt) for f in FAMILIES],
)
def test_the_forced_grammar_accepts_the_family_s_calls(engine: tuple[str, Accepts], family: Family) -> None:
    _, accepts = engine
    constraint, _ = tool_constraint(family.fmt, TOOLS, parallel=True)
    assert accepts(constraint, forced_text(family))


@pytest.mark.parametrize("family", LAZY, ids=lambda f: f.fmt)
def test_the_lazy_grammar_lets_the_prose_through_and_accepts_the_call(
    engine: tuple[str, Accepts], family: Family
) -> None:
    _, accepts = engine
    constraint = lazy_tool_constraint(family.fmt, TOOLS, parallel=True, thinking="no")
    assert constraint is not None
    assert accepts(constraint, lazy_text(family))
    # the grammar itself, from where the trigger hands over
    assert accepts(replace(constraint, triggers=()), from_the_trigger(constraint, lazy_text(family)))


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_a_broken_call_is_refused(engine: tuple[str, Accepts], family: Family, broken: str) -> None:
    _, accepts = engine
    # The lazy constraint where the family has one (for hermes the one that takes its two calls), else the
    # forced one; the same grammar accepts the text unbroken, so the refusal is the broken argument's.
    lazy = lazy_tool_constraint(family.fmt, TOOLS, parallel=True, thinking="no")
    constraint, text = (
        (lazy, lazy_text(family)) if lazy else (tool_constraint(family.fmt, TOOLS)[0], forced_text(family))
    )
    assert accepts(constraint, text)
    assert not accepts(constraint, with_arguments(family.fmt, text, BROKEN[broken]))


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_an_integer_s_bounds_hold(engine: tuple[str, Accepts], family: Family) -> None:
    _, accepts = engine
    weather = TOOLS[0]["function"]
    days = {"type": "integer", "minimum": 1, "maximum": 14}
    parameters = {**weather["parameters"], "properties": {**weather["parameters"]["properties"], "days": days}}
    tools = [{"type": "function", "function": {**weather, "parameters": parameters}}, *TOOLS[1:]]
    constraint, _ = tool_constraint(family.fmt, tools, parallel=True)
    text = forced_text(family)
    assert accepts(constraint, text)
    assert not accepts(constraint, with_arguments(family.fmt, text, {"city": "Paris", "days": 15}))


# ---- the parser reads what the grammars accept -----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
def test_the_accepted_text_reads_as_the_family_s_calls_whole_and_streamed(family: Family) -> None:
    _, fmt = tool_constraint(family.fmt, TOOLS)  # the format the forced output is read in
    texts = [(fmt, forced_text(family))]
    lazy = lazy_tool_constraint(family.fmt, TOOLS, parallel=True, thinking="no")
    if lazy is not None:
        texts.append((family.fmt, from_the_trigger(lazy, lazy_text(family))))
    for fmt, text in texts:
        content, calls = parse_tool_calls(fmt, text, TOOLS)
        assert _structured(calls) == list(family.calls) and content.strip() == "", text
        streamed, streamed_calls, _ = _streamed(fmt, text)  # 1 to 3 characters at a time
        assert streamed_calls == list(family.calls) and streamed.strip() == "", text


# ---- a real generation per family -------------------------------------------------------------------------

# Arguments a random model cannot run on with: a bounded integer, an enum, booleans. No string: a tagged
# family writes strings as raw text, which its grammar takes up to the close text whatever the schema's
# maxLength says (CallShape), and a random model may never write the close text.
BOUNDED_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "set_timer",
            "parameters": {
                "type": "object",
                "properties": {
                    "minutes": {"type": "integer", "minimum": 1, "maximum": 90},
                    "sound": {"enum": ["bell", "chime"]},
                    "loud": {"type": "boolean"},
                },
                "required": ["minutes", "sound"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "stop_timer",
            "parameters": {"type": "object", "properties": {"all": {"type": "boolean"}}, "additionalProperties": False},
        },
    },
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in BOUNDED_TOOLS}


@pytest.fixture(scope="module")
def tiny_llama(tiny_gguf: Path) -> Iterator[LlamaCppModel]:
    # One thread: on a loaded 2-core machine llama.cpp's threads spin waiting for each other, and a
    # 100-token generation of this tiny model takes seconds instead of milliseconds.
    model = load(tiny_gguf, threads=1)
    yield model
    model.close()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.fmt)
async def test_a_forced_generation_is_one_call_to_a_known_tool_with_valid_arguments(
    tiny_llama: LlamaCppModel, family: Family
) -> None:
    constraint, fmt = tool_constraint(family.fmt, BOUNDED_TOOLS)
    prompt = tiny_llama.tokenize(f"<|im_start|>user\nSet a timer.{END}\n<|im_start|>assistant\n")
    greedy = SamplingParams(temperature=0.0)
    request = GenerationRequest(prompt, 600, sampling=greedy, speculative="off", constraint=constraint)
    outcome = await run(tiny_llama, request)
    assert outcome.last.finish_reason == "stop", outcome.text  # the grammar ended the reply
    content, calls = parse_tool_calls(fmt, outcome.text, BOUNDED_TOOLS)
    assert content.strip() == "" and len(calls) == 1, outcome.text
    ((name, arguments),) = _structured(calls)
    jsonschema.validate(arguments, SCHEMAS[name])
    streamed, streamed_calls, _ = _streamed(fmt, outcome.text, BOUNDED_TOOLS)
    assert streamed.strip() == "" and streamed_calls == [(name, arguments)], outcome.text
