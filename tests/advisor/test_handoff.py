"""`launcher handoff`: golden outputs on recorded machines, every emitted flag checked against the engines' own
argument lists (recorded --help of vLLM 0.32.0 and SGLang 0.5.23 in tests/data/engine_help, and the real
parsers where the engines are installed), and the sizing rules one by one.

UPDATE_GOLDEN=1 rewrites tests/golden/handoff/*.txt from the current output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from launcher.advisor.engine_flags import EngineFlags, check_argv, parse_help
from launcher.advisor.handoff import Deployment, plan_handoff
from launcher.advisor.handoff_compose import compose_services, compose_yaml, engine_command, env_file
from launcher.advisor.handoff_sizing import Node, context_ladder, described_node, tensor_parallel_size
from launcher.catalog.catalog import default_catalog, find
from launcher.cli import main
from launcher.core.errors import ConfigError, EngineUnavailableError, ModelDoesNotFitError
from launcher.hardware.recorded import load_recorded
from launcher.integrations.agent_models import AGENT_DEFAULT_MODELS

ROOT = Path(__file__).resolve().parents[2]
HELP = ROOT / "tests" / "data" / "engine_help"
GOLDEN = ROOT / "tests" / "golden" / "handoff"
KEY = "test-key-not-secret"

# name -> `launcher handoff` arguments. The four machines of the issue: one RTX 4090, an 8x H100 node,
# two such nodes (recorded, and described by flags), and a Mac (refused).
CASES: dict[str, list[str]] = {
    "rtx4090.qwen3-8b.vllm": ["vllm", "qwen3-8b", "--machine", "rtx4090-desktop"],
    "rtx4090.qwen3-8b.sglang": ["sglang", "qwen3-8b", "--machine", "rtx4090-desktop"],
    "8xh100.llama-3.3-70b.vllm": ["vllm", "llama-3.3-70b", "--machine", "8x-h100-server"],
    "8xh100.llama-3.3-70b.sglang": ["sglang", "llama-3.3-70b", "--machine", "8x-h100-server"],
    "2x8xh100.llama-3.3-70b.vllm": ["vllm", "llama-3.3-70b", "--machine", "8x-h100-server", "--nodes", "2"],
    "2x8xh100.llama-3.3-70b.sglang": ["sglang", "llama-3.3-70b", "--machine", "8x-h100-server", "--nodes", "2"],
    "flags-2x8xh100.qwen3-coder-30b-a3b.vllm": [
        "vllm", "qwen3-coder-30b-a3b", "--gpu", "H100", "--gpus", "8", "--nodes", "2", "--gpu-memory", "80GiB",
    ],
    "mac.qwen3-8b.vllm": ["vllm", "qwen3-8b", "--machine", "mac-studio-m3-ultra-192gb"],
    "mac.qwen3-8b.sglang": ["sglang", "qwen3-8b", "--machine", "mac-studio-m3-ultra-192gb"],
}  # fmt: skip


@cache
def recorded_flags(engine: str) -> EngineFlags:
    """The engine's flags from its recorded --help (plus, for vLLM, its parser registries)."""
    registries = HELP / f"{engine}-registries.txt"
    extra = registries.read_text(encoding="utf-8") if registries.is_file() else ""
    return parse_help((HELP / f"{engine}-serve-help.txt").read_text(encoding="utf-8"), extra)


def _run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["handoff", *argv, "--api-key", KEY])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(CASES))
def test_handoff_output_matches_golden(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_cli(CASES[name], capsys)
    text = (
        f"$ launcher handoff {' '.join(CASES[name])} --api-key {KEY}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}"
    )
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(n for n in CASES if not n.startswith("mac.")))
def test_golden_commands_use_only_flags_the_engine_accepts(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run_cli([*CASES[name], "--json"], capsys)
    assert code == 0
    plan = json.loads(out)
    flags = recorded_flags(plan["engine"])
    for command in plan["commands"]:
        assert command[:2] == [plan["engine"], "serve"]
        assert check_argv(flags, command[2:]) == []


def test_a_mac_is_refused_with_what_to_run_instead(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run_cli(CASES["mac.qwen3-8b.vllm"], capsys)
    assert code != 0 and out == ""
    assert "not on Apple Silicon" in err and "launcher serve" in err and "MLX" in err


def _deployments() -> list[Deployment]:
    """Every catalog model on every recorded NVIDIA machine and on two H100 nodes, with both engines."""
    nodes = [Node.of(load_recorded(n)) for n in ("rtx4090-desktop", "2x-rtx3090-nvlink", "rtx2080ti", "8x-h100-server")]
    out = []
    for engine in ("vllm", "sglang"):
        for model in default_catalog().models:
            for node, count in [(n, None) for n in nodes] + [(nodes[-1], 2)]:
                try:
                    out.append(
                        plan_handoff(engine, model, node, api_key=KEY, nodes=count, agent_names=AGENT_DEFAULT_MODELS)
                    )
                except ModelDoesNotFitError:
                    continue
    return out


def test_every_flag_any_plan_emits_is_in_the_recorded_help() -> None:
    deployments = _deployments()
    assert {d.engine.name for d in deployments} == {"vllm", "sglang"}
    assert {d.weights.format for d in deployments} >= {"fp8", "awq", "bf16", "mxfp4"}
    for d in deployments:
        for rank in range(d.nodes):
            problems = check_argv(recorded_flags(d.engine.name), d.arguments(rank))
            assert problems == [], f"{d.engine.name} {d.model.id} on {d.node.label}: {problems}"


def _engine_python(engine: str) -> str | None:
    """A Python that can import the engine: $LAUNCHER_VLLM_PYTHON / $LAUNCHER_SGLANG_PYTHON, or this one."""
    given = os.environ.get(f"LAUNCHER_{engine.upper()}_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec(engine) is not None else None


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_plan_parses_with_the_installed_engine(engine: str) -> None:
    python = _engine_python(engine)
    if python is None:
        pytest.skip(f"{engine} is not installed here (set LAUNCHER_{engine.upper()}_PYTHON to a Python that has it)")
    argvs = [d.arguments(rank) for d in _deployments() if d.engine.name == engine for rank in range(d.nodes)]
    done = subprocess.run(
        [python, str(Path(__file__).with_name("engine_argparse_check.py")), engine],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cpu")},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"errors": []}


# ------------------------------------------------------------------------------------------ the flag parser


def test_recorded_help_is_parsed_into_flags_values_and_choices() -> None:
    vllm, sglang = recorded_flags("vllm"), recorded_flags("sglang")
    assert vllm.source.startswith("vllm 0.32.0") and sglang.source.startswith("sglang 0.5.23")
    assert vllm.positionals == 1 and sglang.positionals == 0  # `vllm serve MODEL`; SGLang wants --model-path
    tp = vllm.get("-tp")
    assert tp is not None and tp.takes_value and "--tensor-parallel-size" in tp.names
    names = vllm.get("--served-model-name")
    assert names is not None and names.many
    sglang_names = sglang.get("--served-model-name")
    assert sglang_names is not None and not sglang_names.many
    auto = vllm.get("--enable-auto-tool-choice")
    assert auto is not None and not auto.takes_value
    for flags, flag, value in [
        (vllm, "--tool-call-parser", "hermes"),
        (vllm, "--reasoning-parser", "qwen3"),  # from the registries file
        (vllm, "--kv-cache-dtype", "fp8"),
        (vllm, "--distributed-executor-backend", "ray"),  # vLLM prints this one as a Python list
        (sglang, "--tool-call-parser", "qwen3_coder"),
        (sglang, "--kv-cache-dtype", "fp8_e4m3"),
    ]:
        spec = flags.get(flag)
        assert spec is not None and spec.choices is not None and value in spec.choices, flag


def test_check_argv_names_what_the_engine_would_refuse() -> None:
    vllm = recorded_flags("vllm")
    assert check_argv(vllm, ["org/model", "--tensor-parallel-size", "2", "--served-model-name", "a", "b"]) == []
    assert check_argv(vllm, ["org/model", "--tensor-paralel-size", "2"]) == [
        "unknown flag --tensor-paralel-size",
        "unexpected argument '2'",
    ]
    assert check_argv(vllm, ["m", "--tool-call-parser", "hermes2"]) == [
        "--tool-call-parser 'hermes2' is not one of its choices"
    ]
    assert check_argv(vllm, ["m", "--max-model-len"]) == ["--max-model-len needs a value"]
    assert check_argv(vllm, ["m", "--enable-auto-tool-choice=yes"]) == ["--enable-auto-tool-choice takes no value"]
    assert check_argv(recorded_flags("sglang"), ["org/model"]) == ["unexpected argument 'org/model'"]


# ------------------------------------------------------------------------------------------ sizing rules


def test_tensor_parallel_is_the_largest_power_of_two_that_splits_the_heads() -> None:
    assert tensor_parallel_size(find("llama-3.3-70b").architecture, 8) == 8
    assert tensor_parallel_size(find("phi-4").architecture, 8) == 2  # 40 heads, 10 KV heads
    assert tensor_parallel_size(find("qwen3-coder-30b-a3b").architecture, 8) == 8  # 4 KV heads, copied twice
    assert tensor_parallel_size(find("llama-3.3-70b").architecture, 6) == 4
    assert tensor_parallel_size(find("gemma-3-270m").architecture, 8) == 4  # 4 heads; its one KV head is copied
    assert context_ladder(40960) == [40960, 32768, 16384, 8192, 4096]
    assert context_ladder(32768) == [32768, 16384, 8192, 4096]


def _plan(engine: str, model: str, machine: str, **kwargs: object) -> Deployment:
    return plan_handoff(engine, find(model), Node.of(load_recorded(machine)), api_key=KEY, **kwargs)  # type: ignore[arg-type]


def test_fp8_on_ada_and_hopper_awq_on_ampere_bf16_when_nothing_quantized() -> None:
    assert _plan("vllm", "qwen3-8b", "rtx4090-desktop").weights.repo == "Qwen/Qwen3-8B-FP8"
    assert _plan("vllm", "qwen3-8b", "2x-rtx3090-nvlink").weights.repo == "Qwen/Qwen3-8B-AWQ"
    ampere_bf16 = _plan("vllm", "phi-4", "2x-rtx3090-nvlink")
    assert (ampere_bf16.weights.format, ampere_bf16.weights.repo) == ("bf16", "microsoft/phi-4")
    online = _plan("vllm", "phi-4", "8x-h100-server")  # no FP8 repo: quantized as it loads
    assert (online.weights.format, online.weights.quantization) == ("fp8", "fp8")
    assert "--quantization" in online.arguments()
    gpt_oss = _plan("sglang", "gpt-oss-20b", "rtx4090-desktop")
    assert (gpt_oss.weights.format, gpt_oss.tool_parser, gpt_oss.reasoning_parser) == ("mxfp4", "gpt-oss", "gpt-oss")


def test_a_smaller_format_comes_before_more_nodes_and_more_nodes_when_nothing_fits() -> None:
    smaller = _plan("vllm", "qwen3-32b", "rtx4090-desktop", agent_context=32768)
    assert (smaller.weights.format, smaller.nodes) == ("awq", 1)
    assert any("Not FP8" in r for r in smaller.reasons) and any("Coding agents want" in r for r in smaller.reasons)
    bigger = _plan("vllm", "llama-3.3-70b", "rtx4090-desktop")
    assert bigger.nodes == 2 and "--pipeline-parallel-size" in bigger.arguments()
    with pytest.raises(ModelDoesNotFitError, match="Add nodes"):
        _plan("vllm", "llama-3.3-70b", "rtx4090-desktop", nodes=1)


def test_context_and_kv_cache_follow_the_memory_left() -> None:
    desktop = _plan("vllm", "qwen3-8b", "rtx4090-desktop")
    assert (desktop.context, desktop.kv_cache_dtype) == (40960, "fp8")  # a 16-bit cache would cap it at 16k
    assert desktop.sizing.full_sequences >= 4
    one_request = _plan("vllm", "qwen3-8b", "rtx4090-desktop", sequences=1)
    assert (one_request.context, one_request.kv_cache_dtype) == (40960, None)
    ampere = _plan("vllm", "qwen3-8b", "2x-rtx3090-nvlink")
    assert ampere.kv_cache_dtype is None  # no FP8 KV cache below compute capability 8.9
    server = _plan("sglang", "llama-3.3-70b", "8x-h100-server")
    assert server.context == 131072 and server.memory_fraction < 0.9  # SGLang's static pool leaves out the overhead


def test_parsers_names_and_multi_node_flags_per_engine() -> None:
    vllm = _plan("vllm", "qwen3-coder-30b-a3b", "8x-h100-server", agent_names=AGENT_DEFAULT_MODELS)
    args = vllm.arguments()
    assert args[0] == "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
    assert args[args.index("--served-model-name") + 1 : args.index("--host")] == [
        "qwen3-coder-30b-a3b",
        *AGENT_DEFAULT_MODELS,
    ]
    assert args[args.index("--tool-call-parser") + 1] == "qwen3_coder" and "--enable-auto-tool-choice" in args
    assert "--reasoning-parser" not in args  # an instruct model: no thinking to parse
    sglang = _plan("sglang", "llama-3.3-70b", "8x-h100-server", nodes=2, agent_names=AGENT_DEFAULT_MODELS)
    node1 = sglang.arguments(1, head="10.0.0.1")
    assert node1[:2] == ["--model-path", "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"]
    assert node1[node1.index("--served-model-name") + 1] == "llama-3.3-70b" and "claude-sonnet-4-5" not in node1
    assert (
        node1[node1.index("--node-rank") + 1] == "1" and node1[node1.index("--dist-init-addr") + 1] == "10.0.0.1:5000"
    )
    assert "--enable-auto-tool-choice" not in node1
    gemma = _plan("vllm", "gemma-3-27b", "8x-h100-server")
    assert gemma.tool_parser is None and any("No tool-call parser" in r for r in gemma.reasons)


def test_machines_the_engines_cannot_use_are_refused() -> None:
    with pytest.raises(EngineUnavailableError, match="Apple Silicon"):
        _plan("sglang", "qwen3-8b", "macbook-air-m2-16gb")
    with pytest.raises(EngineUnavailableError, match="needs NVIDIA GPUs"):
        _plan("vllm", "qwen3-8b", "cpu-avx2-laptop-16gb")
    with pytest.raises(ConfigError, match="vllm or sglang"):
        _plan("tgi", "qwen3-8b", "8x-h100-server")


def test_gpus_named_by_flags() -> None:
    node = described_node("H100", 8, 80 * 1024**3)
    assert len(node.gpus) == 8 and node.gpus[0].compute_capability == (9, 0) and node.gpus[7].index == 7
    assert described_node("NVIDIA GeForce RTX 4090", 1).gpus[0].memory_total == 24 * 1024**3
    with pytest.raises(ConfigError, match="several memory sizes"):
        described_node("H100", 8)
    with pytest.raises(ConfigError, match="does not name one NVIDIA GPU"):
        described_node("Voodoo 5", 1)


# ------------------------------------------------------------------------------------------ files


def test_compose_files_keep_the_key_in_env_only() -> None:
    d = _plan("vllm", "llama-3.3-70b", "8x-h100-server", nodes=2)
    services = yaml.safe_load(compose_yaml(d))["services"]
    assert set(services) == {"ray-head", "ray-worker"} == set(compose_services(d))
    head = services["ray-head"]["command"][0]
    assert head.startswith("ray start --head --port=6379 && exec vllm serve ")
    assert "--pipeline-parallel-size 2" in head and "--distributed-executor-backend ray" in head
    assert services["ray-worker"]["command"] == ["exec ray start --address=${HEAD_ADDRESS}:6379 --block"]
    assert all(s["network_mode"] == "host" for s in services.values())
    assert KEY not in compose_yaml(d) and f"LAUNCHER_API_KEY={KEY}" in env_file(d)
    single = _plan("sglang", "qwen3-8b", "rtx4090-desktop")
    service = yaml.safe_load(compose_yaml(single))["services"]["sglang"]
    assert service["entrypoint"] + service["command"] == engine_command(single)
    assert service["ports"] == ["8000:8000"]


def test_cli_writes_private_env_and_makes_a_key_when_none_is_given(tmp_path: Path) -> None:
    out = tmp_path / "deploy"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "handoff",
            "vllm",
            "qwen3-8b",
            "--machine",
            "rtx4090-desktop",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == {"compose.yaml", ".env", "run.txt"}
    assert stat.S_IMODE((out / ".env").stat().st_mode) == 0o600
    key = next(
        line.split("=", 1)[1]
        for line in (out / ".env").read_text().splitlines()
        if line.startswith("LAUNCHER_API_KEY=")
    )
    assert len(key) >= 32
    assert key not in (out / "compose.yaml").read_text() and key not in done.stdout
    assert "vllm serve Qwen/Qwen3-8B-FP8" in (out / "run.txt").read_text()


def test_check_reads_the_installed_engines_own_help(tmp_path: Path) -> None:
    # An executable named `sglang` on PATH that answers `sglang serve --help` with SGLang 0.5.23's recorded help:
    # the --check path as it runs where the engine is installed.
    help_text = HELP / "sglang-serve-help.txt"
    program = tmp_path / "sglang"
    program.write_text(f"#!/bin/sh\ncat '{help_text}'\n", encoding="utf-8")
    program.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "handoff",
        "sglang",
        "qwen3-8b",
        "--machine",
        "rtx4090-desktop",
        "--check",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("--check: every flag is accepted by the installed SGLang")
    program.write_text(f"#!/bin/sh\ngrep -v -- '--tool-call-parser' '{help_text}'\n", encoding="utf-8")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 1 and "--check: unknown flag --tool-call-parser" in done.stdout
