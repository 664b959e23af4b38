"""The lazy call grammars of Llama 3.x and gpt-oss (harmony) on llama.cpp's grammar sampler, run as the
engine runs them (engines/llamacpp/_lazy.py): they
compile with their triggers, the family's calls pass whole (the grammar takes over at the call, from
the token that set a trigger off), text that is no call stays free, and a started call can only go on
as a call to one of the request's tools with arguments its schema allows.

The tiny GGUF's tokenizer spells the families' control tokens out in pieces, so triggers meet the text
at every kind of token boundary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.engines.base import Constraint
from launcher.engines.llamacpp._sampling import compile_constraint
from launcher.server.core.templates import ToolFormat
from launcher.server.core.toolcalls import lazy_tool_constraint
from tests.engines.llamacpp.support import LazyGrammarProbe
from tests.server.test_tool_families import TOOLS


class _Probe(LazyGrammarProbe):
    def refused_at_constraint(self, constraint: Constraint, text: str) -> int | None:
        return self.refused_at(compile_constraint(constraint), constraint.triggers, text)


@pytest.fixture(scope="module")
def probe(tiny_gguf: Path) -> Iterator[_Probe]:
    lazy_probe = _Probe(tiny_gguf)
    yield lazy_probe
    lazy_probe.close()


ANALYSIS = "<|channel|>analysis<|message|>I could write to=functions.get_weather <|constrain|>json.<|end|>"


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        # gpt-oss, the channel first (up to its end-of-generation token <|call|>, which ends the reply)
        (
            "harmony",
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 2}',
        ),
        # the recipient first, as the template writes earlier calls: the reply's first header, and one after
        # the analysis
        ("harmony", ' to=functions.read_file<|channel|>commentary json<|message|>{"path": "a.py"}'),
        (
            "harmony",
            f"{ANALYSIS}<|start|>assistant to=functions.get_weather<|channel|>commentary json"
            '<|message|>{"city": "Paris"}',
        ),
        # Llama 3.x, after <|python_tag|> and bare
        ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'),
        ("llama3", '{"name": "read_file", "parameters": {"path": "a.py"}}'),
    ],
)
def test_the_family_s_call_passes_whole(probe: _Probe, fmt: ToolFormat, reply: str) -> None:
    constraint = lazy_tool_constraint(fmt, TOOLS, parallel=True, thinking="no")
    assert probe.refused_at_constraint(constraint, reply) is None
    # the grammar took the call: once it is whole, the reply ends
    assert probe.refused_at_constraint(constraint, reply + "\nThe end.") == len(reply)


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        ("harmony", f"{ANALYSIS}<|start|>assistant<|channel|>final<|message|>It is sunny in Paris today."),
        ("harmony", "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant<|channel|>final"),
        ("llama3", '{"name": "Paris", "country": "France"}'),
        ("llama3", "<|python_tag|>print('the answer is sunny')"),
        ("llama3", 'It is sunny. {"name": "get_weather", "parameters": {"cities": []}}'),
    ],
)
def test_text_that_is_no_call_stays_free(probe: _Probe, fmt: ToolFormat, reply: str) -> None:
    constraint = lazy_tool_constraint(fmt, TOOLS, parallel=True, thinking="no")
    assert probe.refused_at_constraint(constraint, reply) is None


@pytest.mark.parametrize(
    ("fmt", "reply", "refused"),
    [
        (
            "harmony",
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"town": "Paris"}',
            "town",
        ),
        ("harmony", ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": 2}', "2}"),
        ("harmony", "<|channel|>commentary to=functions.get_weather and a story", "and"),
        ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"town": "Paris"}}', "town"),
        ("llama3", '<|python_tag|>{"name": "browse", "parameters": {}}', "browse"),
        ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris", "days": "two"}}', "two"),
    ],
)
def test_a_started_call_goes_on_only_as_a_call_to_a_request_s_tool(
    probe: _Probe, fmt: ToolFormat, reply: str, refused: str
) -> None:
    constraint = lazy_tool_constraint(fmt, TOOLS, parallel=True, thinking="no")
    at = probe.refused_at_constraint(constraint, reply)
    wrong = reply.rindex(refused)
    # the token refused is the one that starts the wrong text (it may begin with a quote or a space)
    assert at is not None and wrong - 2 <= at <= wrong, (at, reply[at or 0 :])
