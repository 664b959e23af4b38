"""An engine's accepted flags, read from its own `--help` text, and a check of a command line against them.

vLLM and SGLang are not dependencies of the launcher, so the hand-off cannot ask their argument
parsers directly. Their help text names every flag, whether it takes a value and, for most
enumerations, the allowed choices. Flags whose help shows no choices but whose values come from a
registry (vLLM's `--reasoning-parser`, `--quantization`) can be given as extra lines
`--flag: name name ...`. The tests keep recorded help of pinned versions (tests/data/engine_help);
`launcher handoff --check` reads the help of the engine installed on the machine.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9][\w-]*.*?)(?:\s{2,}.*)?$")
_ALIAS_SPLIT = re.compile(r", (?=-)")
_FLAG = re.compile(r"^(-{1,2}[A-Za-z0-9][\w-]*)(?:[ =](.*))?$")
_REGISTRY_LINE = re.compile(r"^(--[\w-]+): (.+)$")
_SECTION = re.compile(r"^\S.*:$")


@dataclass(frozen=True)
class FlagSpec:
    """One option as the engine's help shows it."""

    names: tuple[str, ...]  # "--tensor-parallel-size", "-tp"
    takes_value: bool
    many: bool = False  # NAME [NAME ...]: one or more values
    choices: frozenset[str] | None = None


@dataclass(frozen=True)
class EngineFlags:
    """Every flag one engine version accepts, and how many bare words (a model tag) it takes."""

    source: str  # the recording's first line, or where the help came from
    flags: dict[str, FlagSpec] = field(default_factory=dict)
    positionals: int = 0

    def get(self, name: str) -> FlagSpec | None:
        """The option called `name` (any of its spellings), or None."""
        return self.flags.get(name)


def _choices(spec: str) -> frozenset[str] | None:
    """`{a,b}` (argparse), `['a', 'b']` (vLLM's literal lists) or nothing; trailing words are ignored."""
    if spec.startswith("{"):
        return frozenset(spec[1 : spec.index("}")].split(","))
    if spec.startswith("["):
        try:
            values = ast.literal_eval(spec[: spec.index("]") + 1])
        except (ValueError, SyntaxError):
            return None  # "[NAME]": an optional value, not a list of choices
        return frozenset(str(v) for v in values) if isinstance(values, list) else None
    return None


def _flag_spec(invocation: str) -> FlagSpec:
    names: list[str] = []
    value = ""
    for part in _ALIAS_SPLIT.split(invocation.strip()):
        match = _FLAG.match(part.strip())
        if match is None:
            continue
        names.append(match.group(1))
        value = value or (match.group(2) or "").strip()
    return FlagSpec(
        names=tuple(names),
        takes_value=bool(value),
        many=value.endswith("...]"),
        choices=_choices(value),
    )


def parse_help(text: str, registries: str = "") -> EngineFlags:
    """The flags in an argparse `--help` text, with the registries' choices laid over them."""
    lines = text.splitlines()
    source = lines[0].lstrip("# ").strip() if lines and lines[0].startswith("#") else "engine --help"
    flags: dict[str, FlagSpec] = {}
    positionals = 0
    section = ""
    for line in lines:
        if _SECTION.match(line):
            section = line
            continue
        if section == "positional arguments:" and re.match(r"^  \w", line):
            positionals += 1
            continue
        match = _OPTION_LINE.match(line)
        if match is None:
            continue
        spec = _flag_spec(match.group(1))
        for name in spec.names:
            flags[name] = spec
    for line in registries.splitlines():
        match = _REGISTRY_LINE.match(line.strip())
        if match and match.group(1) in flags:
            spec = flags[match.group(1)]
            widened = FlagSpec(spec.names, spec.takes_value, spec.many, frozenset(match.group(2).split()))
            for name in spec.names:
                flags[name] = widened
    return EngineFlags(source=source, flags=flags, positionals=positionals)


def check_argv(engine: EngineFlags, argv: list[str]) -> list[str]:
    """What in `argv` (the words after `vllm serve` / `sglang serve`) the engine would refuse; [] when none."""
    problems: list[str] = []
    bare = 0
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("-"):
            bare += 1
            if bare > engine.positionals:
                problems.append(f"unexpected argument {word!r}")
            continue
        name, _, inline = word.partition("=")
        spec = engine.get(name)
        if spec is None:
            problems.append(f"unknown flag {name}")
            continue
        values = [inline] if inline else []
        if spec.takes_value and not inline:
            while index < len(argv) and not argv[index].startswith("--") and (spec.many or not values):
                values.append(argv[index])
                index += 1
        if spec.takes_value and not values:
            problems.append(f"{name} needs a value")
        if not spec.takes_value and inline:
            problems.append(f"{name} takes no value")
        if spec.choices is not None:
            problems += [f"{name} {v!r} is not one of its choices" for v in values if v not in spec.choices]
    return problems
