"""`launcher handoff vllm|sglang MODEL`: a vLLM or SGLang deployment sized for this machine or the GPUs named.

Prints (or with --out writes) the engine command, a docker compose file, its .env and a run.txt;
--json prints the plan. --check runs the installed engine's own --help and checks every flag.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from launcher.advisor.handoff import DEFAULT_PORT, DEFAULT_SEQUENCES, Deployment
from launcher.advisor.handoff_compose import KEY_ENV, KEY_REF, compose_yaml, engine_command, env_file, run_text
from launcher.advisor.handoff_engines import HANDOFF_ENGINES
from launcher.advisor.handoff_sizing import MAX_NODES, Node
from launcher.core.errors import ConfigError, EngineUnavailableError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `launcher handoff`."""
    parser.add_argument("engine", choices=sorted(HANDOFF_ENGINES), help="the datacenter engine to hand off to")
    parser.add_argument("model", help="catalog id (launcher recommend lists them)")
    parser.add_argument("--machine", metavar="NAME", help="plan for a recorded machine instead of this one")
    parser.add_argument("--gpu", metavar="NAME", help="plan for GPUs of this kind: H100, A100, RTX 4090, L40S, ...")
    parser.add_argument("--gpus", type=int, metavar="N", help="GPUs per node (default: as many as found)")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="memory of each GPU, e.g. 80GiB (default: the GPU's)")
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help=f"nodes like this one (default: as few as hold the model, <= {MAX_NODES})",
    )
    parser.add_argument(
        "--sequences",
        type=int,
        default=DEFAULT_SEQUENCES,
        help=f"full-length requests the KV cache must hold at once (default {DEFAULT_SEQUENCES})",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the server's port (default {DEFAULT_PORT})")
    parser.add_argument("--api-key", help="the key clients must send (default: a new random one)")
    parser.add_argument("--out", metavar="DIR", type=Path, help="write compose.yaml, .env and run.txt into DIR")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--check", action="store_true", help="check the flags with the installed engine's --help")


def _node(args: argparse.Namespace) -> Node:
    from launcher.advisor.handoff_sizing import described_node
    from launcher.core.units import parse_bytes
    from launcher.hardware.machine import Machine

    machine: Machine | None = None
    if args.machine:
        from launcher.hardware.recorded import load_recorded

        machine = load_recorded(args.machine)
    if not (args.gpu or args.gpus or args.gpu_memory):
        if machine is None:
            from launcher.hardware.probe import probe_machine

            machine = probe_machine()
        return Node.of(machine)
    gpu = args.gpu
    if gpu is None:
        if machine is None:
            from launcher.hardware.probe import probe_machine

            machine = probe_machine()
        found = machine.nvidia_gpus
        if not found:
            raise ConfigError("name the GPUs to plan for: --gpu H100 (no NVIDIA GPU here to copy)")
        gpu = found[0].name
    count = args.gpus or (len(machine.nvidia_gpus) if machine is not None and machine.nvidia_gpus else 1)
    try:
        memory = parse_bytes(args.gpu_memory) if args.gpu_memory else None
    except ValueError as err:
        raise ConfigError(f"--gpu-memory: {err}") from err
    return described_node(gpu, count, memory)


def deployment_json(d: Deployment) -> dict[str, Any]:
    """The plan as plain JSON; commands carry the key as ${LAUNCHER_API_KEY}, `api_key` holds it."""
    s = d.sizing
    return {
        "engine": d.engine.name,
        "model": d.model.id,
        "repo": d.weights.repo,
        "revision": d.weights.revision,
        "format": d.weights.format,
        "quantization": d.weights.quantization,
        "gpu": d.node.gpus[0].name,
        "gpus_per_node": len(d.node.gpus),
        "nodes": d.nodes,
        "tensor_parallel": d.tensor_parallel,
        "pipeline_parallel": d.nodes,
        "context": d.context,
        "kv_cache_dtype": d.kv_cache_dtype,
        "memory_fraction": d.memory_fraction,
        "served_names": list(d.served_names),
        "tool_call_parser": d.tool_parser,
        "reasoning_parser": d.reasoning_parser,
        "port": d.port,
        "image": d.engine.image,
        "api_key_env": KEY_ENV,
        "api_key": d.api_key,
        "per_gpu": {
            "budget": s.budget,
            "weights": s.weights,
            "kv_cache": s.room,
            "full_length_requests": s.full_sequences,
        },
        "commands": [engine_command(d, rank) for rank in d.server_ranks],
        "reasons": list(d.reasons),
    }


def check_installed(d: Deployment) -> list[str]:
    """Problems the installed engine's own --help finds in the command lines; raises when it is not installed."""
    from launcher.advisor.engine_flags import check_argv, parse_help

    program = shutil.which(d.engine.program[0])
    if program is None:
        raise EngineUnavailableError(
            f"--check: {d.engine.label} is not installed here ({d.engine.program[0]} is not on PATH); "
            "run it where the engine is installed"
        )
    done = subprocess.run([program, *d.engine.help_args], capture_output=True, text=True, timeout=300, check=False)
    flags = parse_help(done.stdout)
    if not flags.flags:
        said = (done.stderr.strip().splitlines() or ["nothing on stderr"])[-1]
        raise EngineUnavailableError(f"--check: `{program} {' '.join(d.engine.help_args)}` printed no flags ({said})")
    return [problem for rank in d.server_ranks for problem in check_argv(flags, d.arguments(rank, api_key=KEY_REF))]


def _write(out: Path, d: Deployment) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("compose.yaml", compose_yaml(d)), (".env", env_file(d)), ("run.txt", run_text(d))):
        path = out / name
        if name == ".env":  # the key: created private, never world-readable even for a moment
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    """Plan the deployment and print or write it."""
    from launcher.advisor.handoff import plan_handoff
    from launcher.catalog.catalog import find
    from launcher.integrations.agent_models import AGENT_DEFAULT_MODELS
    from launcher.integrations.agents import AGENTS

    model = find(args.model)
    deployment = plan_handoff(
        args.engine,
        model,
        _node(args),
        api_key=args.api_key or secrets.token_urlsafe(32),
        nodes=args.nodes,
        sequences=args.sequences,
        agent_names=AGENT_DEFAULT_MODELS,
        agent_context=max(agent.min_context for agent in AGENTS.values() if agent.needs_tools),
        port=args.port,
    )
    if args.check:
        problems = check_installed(deployment)
        for problem in problems:
            print(f"--check: {problem}")
        if problems:
            return 1
        print(f"--check: every flag is accepted by the installed {deployment.engine.label}")
    if args.json:
        print(json.dumps(deployment_json(deployment), indent=2))
        return 0
    if args.out:
        for path in _write(args.out, deployment):
            print(f"wrote {path}")
        print()
        print(run_text(deployment), end="")
        return 0
    print(run_text(deployment))
    print(f"--- compose.yaml (the key is read from .env as {KEY_REF}) ---")
    print(compose_yaml(deployment))
    print("--- .env (keep it private: it holds the API key) ---")
    print(env_file(deployment), end="")
    return 0
