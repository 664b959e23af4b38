"""A `Deployment` as files: the shell commands, a docker compose file, its .env and a run.txt.

The API key is written once, into .env; the commands and compose.yaml refer to ${LAUNCHER_API_KEY}
(compose fills it in from .env, a shell from the environment). Multi-node vLLM runs on a Ray
cluster (a head service and a worker service, one per node); multi-node SGLang starts the same
server on every node with its --node-rank.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from launcher.advisor.handoff import Deployment
from launcher.advisor.handoff_sizing import MEMORY_FRACTION

KEY_ENV = "LAUNCHER_API_KEY"  # also the variable `launcher connect` reads the key from
KEY_REF = "${" + KEY_ENV + "}"
HEAD_REF = "${HEAD_ADDRESS}"
RAY_PORT = 6379
HF_CACHE = "${HOME}/.cache/huggingface:/root/.cache/huggingface"


def shell_word(word: str) -> str:
    """A word for a shell: quoted, but with ${VAR} references left for the shell to expand."""
    return f'"{word}"' if "${" in word else shlex.quote(word)


def shell_command(words: list[str]) -> str:
    """One command over several lines: each --flag with its values on a line of its own."""
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(shell_word(word))
    return " \\\n    ".join(" ".join(line) for line in lines)


def engine_command(d: Deployment, node_rank: int = 0) -> list[str]:
    """The engine's command on `node_rank`, with the key and the head's address as ${VAR} references."""
    return [*d.engine.program, *d.arguments(node_rank, api_key=KEY_REF, head=HEAD_REF)]


def shell_steps(d: Deployment) -> list[tuple[str, str]]:
    """(where, command) in the order to run them on bare metal."""
    serve = shell_command(engine_command(d))
    if d.nodes == 1:
        return [("on the GPU machine", serve)]
    if not d.engine.server_per_node:
        return [
            ("on the head node", f"ray start --head --port={RAY_PORT}"),
            (f"on each of the other {d.nodes - 1} node(s)", f'ray start --address="{HEAD_REF}:{RAY_PORT}" --block'),
            ("on the head node, once the workers have joined (`ray status` lists them)", serve),
        ]
    return [
        (
            f"on node {rank}" + (" (the head: it serves the API)" if rank == 0 else ""),
            shell_command(engine_command(d, rank)),
        )
        for rank in d.server_ranks
    ]


def _service(d: Deployment, entrypoint: list[str], command: list[str], *, host_network: bool) -> dict[str, Any]:
    service: dict[str, Any] = {"image": d.engine.image, "entrypoint": entrypoint, "command": command}
    if host_network:
        service["network_mode"] = "host"  # the nodes reach each other's NCCL and Ray ports directly
    else:
        service["ports"] = [f"{d.port}:{d.port}"]
    service.update(
        {
            "ipc": "host",  # NCCL and the engines' workers share memory through /dev/shm
            "environment": {"HF_TOKEN": "${HF_TOKEN:-}"},
            "volumes": [HF_CACHE],
            "deploy": {
                "resources": {
                    "reservations": {"devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}
                }
            },
            "restart": "unless-stopped",
        }
    )
    return service


def compose_services(d: Deployment) -> dict[str, dict[str, Any]]:
    """The compose file's services: one server, a Ray head and worker (vLLM), or one per node (SGLang)."""
    name = d.engine.name
    if d.nodes == 1:
        return {name: _service(d, list(d.engine.program), d.arguments(api_key=KEY_REF), host_network=False)}
    if not d.engine.server_per_node:
        serve = " ".join(shell_word(w) for w in engine_command(d))
        return {
            "ray-head": _service(
                d, ["/bin/bash", "-c"], [f"ray start --head --port={RAY_PORT} && exec {serve}"], host_network=True
            ),
            "ray-worker": _service(
                d, ["/bin/bash", "-c"], [f"exec ray start --address={HEAD_REF}:{RAY_PORT} --block"], host_network=True
            ),
        }
    return {
        f"{name}-node{rank}": _service(
            d, list(d.engine.program), d.arguments(rank, api_key=KEY_REF, head=HEAD_REF), host_network=True
        )
        for rank in d.server_ranks
    }


def compose_yaml(d: Deployment) -> str:
    """compose.yaml, with a header saying what it runs and how to start it."""
    header = [
        f"# {d.engine.label} serving {d.model.name} ({d.weights.repo}), written by `launcher handoff`.",
        "# Needs Docker with the NVIDIA Container Toolkit; reads LAUNCHER_API_KEY, HF_TOKEN (and HEAD_ADDRESS)",
        "# from .env next to it.",
    ]
    if d.nodes == 1:
        header.append("# Start: docker compose up -d")
    elif not d.engine.server_per_node:
        header += [
            "# Start: docker compose up -d ray-head on the head node, then docker compose up -d ray-worker on",
            f"# each of the other {d.nodes - 1} node(s): the same compose.yaml and .env everywhere, HEAD_ADDRESS set",
            "# to the head's address.",
        ]
    else:
        header += [
            f"# Start: docker compose up -d {d.engine.name}-nodeN on node N (0..{d.nodes - 1}), the same compose.yaml",
            "# and .env on each, HEAD_ADDRESS set to node 0's address; node 0 serves the API.",
        ]
    body = yaml.safe_dump({"services": compose_services(d)}, sort_keys=False, width=1000, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def env_file(d: Deployment) -> str:
    """.env: the key (the only place it is written), a Hub token slot and, for several nodes, the head's address."""
    lines = [
        "# Read by docker compose next to compose.yaml. Keep it private (mode 0600): it holds the API key.",
        f"{KEY_ENV}={d.api_key}",
        "# A Hugging Face token, needed for gated repos (Llama, Gemma):",
        "HF_TOKEN=",
    ]
    if d.nodes > 1:
        lines += ["# The head node's address, as the other nodes reach it:", "HEAD_ADDRESS="]
    return "\n".join(lines) + "\n"


def run_text(d: Deployment) -> str:
    """run.txt: what runs where, why, and how to connect an agent."""
    gpus = f"{d.nodes} node(s) x {d.node.gpu_summary}" if d.nodes > 1 else d.node.gpu_summary
    lines = [
        f"{d.engine.label} deployment of {d.model.name} on {gpus}",
        f"  weights: {d.weights.repo} ({d.weights.format.upper()})",
        f"  context: {d.context:,} tokens; tensor parallel {d.tensor_parallel} x pipeline parallel {d.nodes}",
        "",
        "Why:",
        *(f"  - {reason}" for reason in d.reasons),
        "",
        "Run it with Docker: docker compose up -d (see compose.yaml for several nodes).",
        "Or on bare metal, with the engine installed and the variables of .env exported (set -a; . ./.env; set +a):",
    ]
    for where, command in shell_steps(d):
        lines += ["", f"# {where}", command]
    host = "localhost" if d.nodes == 1 else "HEAD_ADDRESS"
    lines += [
        "",
        f"Connect an agent: launcher connect claude-code --base-url http://{host}:{d.port}/v1 --model {d.model.id}",
        f"  (the key comes from ${KEY_ENV}; the server lists the model at /v1/models once it has loaded)",
    ]
    if d.memory_fraction < MEMORY_FRACTION and not d.engine.static_memory_fraction:
        lines.append(
            "  Close other programs using the GPU before starting: the fraction above counts on the memory free now."
        )
    return "\n".join(lines) + "\n"
