"""Tool calls as model families write them, for every engine's "tool_calls" grammar tests: the
constraint for two tools in each family's shape, the texts of well-formed calls, and broken ones.

Each engine's test runs the same cases through its own grammar (llama.cpp's GBNF sampler, llguidance
for MLX and ExLlama) over a tiny model's real tokenizer: a text is accepted when the grammar lets a
model write exactly it and stop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from launcher.engines.base import CallShape, Constraint

TIMER = {
    "type": "object",
    "properties": {
        "minutes": {"type": "integer"},
        "sound": {"enum": ["bell", "chime"]},
        "loud": {"type": "boolean"},
        "note": {"type": "string"},
    },
    "required": ["minutes", "sound"],
}
STOP = {"type": "object", "properties": {}}
TOOLS = ("set_timer", "stop_timer")  # the order of each family's call shapes

# Raw text that must come through a raw-text value whole: markup, code, near misses of the close tags.
TRICKY_TEXTS = (
    'if a < b:\n    print("</p>")\n',
    "x </parameter>\ny",
    "ends with a near miss\n</parameter",
    "\n</parameter >\n</ parameter>\n",
    "</parameter>\n",  # the open tag's newline is not the close tag's
    "a </arg_value b\n</arg_key>",
    "naïve — ü 日本 ✓",
)


@dataclass(frozen=True)
class Family:
    """How one family writes calls: its constraint for TIMER and STOP, and its text for calls."""

    name: str
    constraint: Constraint  # calls may repeat (parallel calls)
    open: str  # text before the calls
    close: str  # text after them

    def call(self, tool: str, **arguments: str) -> str:
        """One call's text; `arguments` are written as the family writes them (raw text or JSON)."""
        shape = self.constraint.calls[TOOLS.index(tool)]
        if shape.params is None:
            body = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in arguments.items()) + "}"
        else:
            body = "".join(shape.params[0].format(name=k) + v + shape.params[1] for k, v in arguments.items())
        return shape.prefix_text + body + shape.suffix_text

    def reply(self, *calls: str) -> str:
        return self.open + "\n".join(calls) + self.close


def _tagged(name: str, prefix: str, suffix: str, params: tuple[str, str], open_text: str = "") -> Family:
    shapes = tuple(
        CallShape(prefix.format(tool=tool), schema, suffix, params)
        for tool, schema in zip(TOOLS, (TIMER, STOP), strict=True)
    )
    constraint = Constraint(kind="tool_calls", prefix_text=open_text, calls=shapes, repeat=True)
    return Family(name, constraint, open_text, "")


QWEN3_CODER = _tagged(
    "qwen3-coder",
    "<tool_call>\n<function={tool}>\n",
    "</function>\n</tool_call>",
    ("<parameter={name}>\n", "\n</parameter>\n"),
)
GLM = _tagged(
    "glm", "<tool_call>{tool}\n", "</tool_call>", ("<arg_key>{name}</arg_key>\n<arg_value>", "</arg_value>\n")
)
DEEPSEEK = Family(
    "deepseek",
    Constraint(
        kind="tool_calls",
        prefix_text="<｜tool▁calls▁begin｜>",
        suffix_text="<｜tool▁calls▁end｜>",
        repeat=True,
        calls=tuple(
            CallShape(
                f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{tool}\n```json\n", schema, "\n```<｜tool▁call▁end｜>"
            )
            for tool, schema in zip(TOOLS, (TIMER, STOP), strict=True)
        ),
    ),
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
)
FAMILIES = (QWEN3_CODER, GLM, DEEPSEEK)


def _json_family(family: Family) -> bool:
    return family.constraint.calls[0].params is None


def accepted(family: Family) -> list[str]:
    """Texts a call grammar of `family` must accept."""
    raw = _json_family(family)

    def text(value: str) -> str:
        return json.dumps(value, ensure_ascii=False) if raw else value

    timer = family.call("set_timer", minutes="5", sound=text("bell"))
    texts = [
        family.reply(timer),
        family.reply(family.call("set_timer", minutes="-12", sound=text("chime"), loud="true")),
        family.reply(timer, family.call("stop_timer"), timer),  # parallel calls
    ]
    texts += [
        family.reply(family.call("set_timer", minutes="1", sound=text("bell"), note=text(note)))
        for note in TRICKY_TEXTS
    ]
    return texts


def refused(family: Family) -> list[str]:
    """Texts a call grammar of `family` must refuse: a wrong type, a missing required property, an
    unknown tool, a value outside its enum, raw text holding the close text."""
    raw = _json_family(family)

    def text(value: str) -> str:
        return json.dumps(value, ensure_ascii=False) if raw else value

    texts = [
        family.reply(family.call("set_timer", minutes='"5"', sound=text("bell"))),
        family.reply(family.call("set_timer", minutes="five", sound=text("bell"))),
        family.reply(family.call("set_timer", minutes="5", sound=text("bell"), loud="yes")),
        family.reply(family.call("set_timer", sound=text("bell"))),
        family.reply(family.call("set_timer", minutes="5", sound=text("horn"))),
        family.reply(family.call("set_timer", minutes="5", sound=text("bell")).replace("set_timer", "launch")),
        family.reply(),
    ]
    if not raw:
        close = family.constraint.calls[0].params[1]  # type: ignore[index]
        note = f"first{close}second"
        texts.append(family.reply(family.call("set_timer", minutes="5", sound="bell", note=note)))
    return texts


def read_qwen3_coder(text: str) -> list[tuple[str, dict[str, str]]] | None:
    """The calls in a whole Qwen3-Coder reply (tool name, raw parameter values), as that family's
    parsers read them; None when the reply is not calls alone."""
    call = r"<tool_call>\n<function=(\w+)>\n((?:<parameter=\w+>\n.*?\n</parameter>\n)*)</function>\n</tool_call>"
    if not re.fullmatch(rf"(?:{call}\s*)+", text, re.DOTALL):
        return None
    return [
        (name, dict(re.findall(r"<parameter=(\w+)>\n(.*?)\n</parameter>\n", body, re.DOTALL)))
        for name, body in re.findall(call, text, re.DOTALL)
    ]


def timer_arguments_are_valid(arguments: dict[str, str]) -> bool:
    """Whether raw Qwen3-Coder values are TIMER's: an integer, one of the sounds, a boolean if any."""
    return (
        re.fullmatch(r"-?[0-9]+ ?", arguments.get("minutes", "")) is not None
        and arguments.get("sound") in ("bell", "chime")
        and arguments.get("loud", "true").strip() in ("true", "false")
        and set(arguments) <= {"minutes", "sound", "loud", "note"}
    )


def lazy_single_call(family: Family, trigger: str) -> Constraint:
    """`family`'s constraint made lazy on `trigger`, for one call, and without TIMER's free-text `note`:
    a random model whose likeliest token is the call marker would write markers into free text forever."""
    timer = {**TIMER, "properties": {k: v for k, v in TIMER["properties"].items() if k != "note"}}
    calls = tuple(replace(s, schema=timer) if s.schema is TIMER else s for s in family.constraint.calls)
    return replace(family.constraint, calls=calls, repeat=False, triggers=(trigger,))
