"""`launcher handoff vllm|sglang MODEL`: the advisor's plan as a vLLM or SGLang deployment.

Pure, like the rest of the advisor: a catalog model and the nodes it will run on go in (a probed
machine, a recorded one, or GPUs named by flags, times `nodes`), and a `Deployment` comes out
with every value an engine flag needs and the reason for each. A machine the engines cannot use
(a Mac, no NVIDIA GPU) or a model that fits nowhere is refused with what to do instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from launcher.advisor.handoff_engines import HANDOFF_ENGINES, HandoffEngine
from launcher.advisor.handoff_sizing import (
    ENGINE_OVERHEAD,
    MAX_NODES,
    MIN_CONTEXT,
    Node,
    Sizing,
    memory_fraction,
    size_on,
    tensor_parallel_size,
)
from launcher.advisor.handoff_weights import Weights, weight_choices
from launcher.catalog.schema import CatalogModel
from launcher.core.errors import ConfigError, EngineUnavailableError, ModelDoesNotFitError
from launcher.core.units import format_bytes

DEFAULT_SEQUENCES = 4
"""Full-length requests the KV cache must hold at once: an agent's main thread and a sub-agent or two."""
FP8_COMPUTE = (8, 9)  # Ada and Hopper: FP8 tensor cores
MIN_COMPUTE = (7, 0)  # the oldest GPUs vLLM's CUDA build supports (Volta)
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class Deployment:
    """Everything the engine's command line and the compose file say, with the reasons."""

    engine: HandoffEngine
    model: CatalogModel
    node: Node
    nodes: int
    tensor_parallel: int
    weights: Weights
    sizing: Sizing
    memory_fraction: float  # the engine flag's value (SGLang's static fraction leaves out the overhead)
    served_names: tuple[str, ...]
    tool_parser: str | None
    reasoning_parser: str | None
    port: int
    api_key: str
    reasons: tuple[str, ...] = ()

    @property
    def context(self) -> int:
        """--max-model-len / --context-length."""
        return self.sizing.context

    @property
    def server_ranks(self) -> range:
        """The nodes that run the engine's server: each of them, or only the head (rank 0)."""
        return range(self.nodes) if self.engine.server_per_node else range(1)

    @property
    def kv_cache_dtype(self) -> str | None:
        """The engine's FP8 KV cache value, or None for the model's own dtype."""
        return self.engine.fp8_kv if self.sizing.fp8_kv else None

    def arguments(self, node_rank: int = 0, *, api_key: str | None = None, head: str = "$HEAD_ADDRESS") -> list[str]:
        """The words after `vllm serve` / `sglang serve` on node `node_rank`. `api_key` stands in for the
        key (an environment variable in files); `head` is the head node's address."""
        e = self.engine
        args = [self.weights.repo] if e.model_flag is None else [e.model_flag, self.weights.repo]
        if self.weights.revision != "main":
            args += ["--revision", self.weights.revision]
        args += ["--served-model-name", *self.served_names, "--host", "0.0.0.0", "--port", str(self.port)]
        args += [e.tensor_parallel, str(self.tensor_parallel)]
        if self.nodes > 1:
            args += [e.pipeline_parallel, str(self.nodes)]
        args += [e.context, str(self.context), e.memory_fraction, f"{self.memory_fraction:.2f}"]
        if self.weights.quantization:
            args += ["--quantization", self.weights.quantization]
        if self.kv_cache_dtype:
            args += [e.kv_cache_dtype, self.kv_cache_dtype]
        args += e.family_flags.get(self.model.family, ())
        if self.tool_parser:
            args += ["--enable-auto-tool-choice"] if e.auto_tool_choice else []
            args += ["--tool-call-parser", self.tool_parser]
        if self.reasoning_parser:
            args += ["--reasoning-parser", self.reasoning_parser]
        if self.nodes > 1:
            args += e.node_flags(self.nodes, node_rank, head)
        return [*args, "--api-key", self.api_key if api_key is None else api_key]


def refuse_unless_nvidia(engine: HandoffEngine, node: Node) -> None:
    """Raise, saying what to do instead, when the engines' CUDA builds cannot run on this node."""
    if node.gpus:
        old = [g for g in node.gpus if (g.compute_capability or (0, 0)) < MIN_COMPUTE]
        if old:
            raise EngineUnavailableError(
                f"{engine.label} needs NVIDIA compute capability 7.0 or newer; {old[0].name} is older. "
                "`launcher serve MODEL` runs the model here with llama.cpp."
            )
        return
    if node.apple_chip:
        raise EngineUnavailableError(
            f"{engine.label} runs on NVIDIA (or AMD) datacenter GPUs, not on Apple Silicon ({node.apple_chip}). "
            "On this Mac, `launcher serve MODEL` runs the model with MLX on the GPU (`launcher recommend MODEL` "
            "says which quant fits). To plan a vLLM or SGLang server, name the GPUs it will have: "
            f"`launcher handoff {engine.name} MODEL --gpu H100 --gpus 8`."
        )
    others = f" ({', '.join(node.other_gpus)}: the hand-off plans for NVIDIA GPUs)" if node.other_gpus else ""
    raise EngineUnavailableError(
        f"{engine.label} needs NVIDIA GPUs, and {node.label} has none{others}. `launcher serve MODEL` runs the "
        f"model here with llama.cpp; to plan a GPU server, name its GPUs: `launcher handoff {engine.name} MODEL "
        "--gpu H100 --gpus 8`."
    )


@dataclass(frozen=True)
class _Pick:
    weights: Weights
    nodes: int
    sizing: Sizing
    passed_over: tuple[Weights, ...]  # better formats that did not fit


def _pick(model: CatalogModel, node: Node, tp: int, nodes: int | None, fraction: float, sequences: int) -> _Pick:
    """The best checkpoint on the fewest nodes (or on exactly `nodes`): fewer nodes beat a better format."""
    fp8 = _fp8_compute(node)
    choices = weight_choices(model, fp8)
    for count in [nodes] if nodes else range(1, MAX_NODES + 1):
        for index, weights in enumerate(choices):
            sizing = size_on(model.architecture, weights.size, node, tp, count, fraction, sequences, fp8_kv=fp8)
            if sizing is not None:
                return _Pick(weights, count, sizing, tuple(choices[:index]))
    smallest = min(choices, key=lambda w: w.size)
    count = nodes or MAX_NODES
    raise ModelDoesNotFitError(
        f"{model.name} does not fit on {count} node(s) of {node.gpu_summary}: even {smallest.format.upper()} "
        f"({format_bytes(smallest.size)}) leaves each GPU {format_bytes(math.ceil(smallest.size / (tp * count)))} "
        f"of weights and {format_bytes(ENGINE_OVERHEAD)} of overhead in {format_bytes(fraction * node.smallest_gpu)}, "
        f"without room for a {MIN_CONTEXT}-token KV cache for {sequences} request(s). "
        "Add nodes (--nodes), use bigger GPUs, or lower --sequences."
    )


def _fp8_compute(node: Node) -> bool:
    return min(g.compute_capability or (0, 0) for g in node.gpus) >= FP8_COMPUTE


def plan_handoff(
    engine_name: str,
    model: CatalogModel,
    node: Node,
    *,
    api_key: str,
    nodes: int | None = None,
    sequences: int = DEFAULT_SEQUENCES,
    agent_names: tuple[str, ...] = (),
    agent_context: int = 0,
    port: int = DEFAULT_PORT,
) -> Deployment:
    """The deployment of `model` with `engine_name` on `nodes` nodes like `node` (None: as few as hold it).

    `agent_names` are the model names coding agents ask for by default (vLLM serves them as aliases);
    `agent_context` is the context they need, below which the reasons warn.
    """
    engine = HANDOFF_ENGINES.get(engine_name)
    if engine is None:
        raise ConfigError(f"unknown engine {engine_name!r}: {' or '.join(HANDOFF_ENGINES)}")
    if nodes is not None and not 1 <= nodes <= MAX_NODES:
        raise ConfigError(f"--nodes must be 1..{MAX_NODES}")
    if sequences < 1:
        raise ConfigError("--sequences must be at least 1")
    refuse_unless_nvidia(engine, node)
    tp = tensor_parallel_size(model.architecture, len(node.gpus))
    fraction, fraction_note = memory_fraction(node)
    pick = _pick(model, node, tp, nodes, fraction, sequences)
    flag_fraction = fraction
    if engine.static_memory_fraction:
        flag_fraction = math.floor((fraction - ENGINE_OVERHEAD / node.smallest_gpu) * 100) / 100
    deployment = Deployment(
        engine=engine,
        model=model,
        node=node,
        nodes=pick.nodes,
        tensor_parallel=tp,
        weights=pick.weights,
        sizing=pick.sizing,
        memory_fraction=flag_fraction,
        served_names=(model.id, *agent_names) if engine.many_served_names else (model.id,),
        tool_parser=engine.tool_parser(model),
        reasoning_parser=engine.reasoning_parser(model),
        port=port,
        api_key=api_key,
    )
    reasons = [
        *_weights_reasons(pick),
        *_parallel_reasons(deployment, nodes, fraction, sequences),
        *_memory_reasons(deployment, fraction, fraction_note, sequences, agent_context),
        *_serving_reasons(deployment, agent_names),
    ]
    return replace(deployment, reasons=tuple(reasons))


def _weights_reasons(pick: _Pick) -> list[str]:
    reasons = [pick.weights.why + "; safetensors, not GGUF, because the engines' fast kernels load safetensors."]
    reasons += [f"Not {w.format.upper()} ({w.repo}): it does not fit with a usable KV cache." for w in pick.passed_over]
    return reasons


def _parallel_reasons(d: Deployment, asked_nodes: int | None, fraction: float, sequences: int) -> list[str]:
    gpus = len(d.node.gpus)
    arch = d.model.architecture
    reasons = []
    if d.tensor_parallel == gpus:
        split = f"tensor parallel over all {gpus} GPUs of each node" if gpus > 1 else "one GPU, no tensor parallel"
        reasons.append(f"{d.engine.tensor_parallel} {d.tensor_parallel}: {split}.")
    else:
        reasons.append(
            f"{d.engine.tensor_parallel} {d.tensor_parallel}, not {gpus}: {arch.attention_heads} attention heads and "
            f"{arch.kv_heads} KV heads split evenly only over {d.tensor_parallel} GPUs; the other "
            f"{gpus - d.tensor_parallel} GPUs of each node stay free for another model."
        )
    if d.nodes == 1:
        return reasons
    stages = (
        f"{d.engine.pipeline_parallel} {d.nodes}: one pipeline stage per node, each holding 1/{d.nodes} of the layers"
    )
    one_node = size_on(
        arch, d.weights.size, d.node, d.tensor_parallel, 1, fraction, sequences, fp8_kv=_fp8_compute(d.node)
    )
    if asked_nodes is None:
        reasons.append(f"{stages}: one node of {d.node.gpu_summary} cannot hold it with a KV cache.")
    elif one_node is not None:
        reasons.append(
            f"{stages}. One node would hold it ({one_node.context:,}-token context); the other node(s) add KV cache "
            "for longer or more requests. For more requests per second instead, run one copy per node "
            "(--nodes 1) behind a load balancer."
        )
    else:
        reasons.append(f"{stages}.")
    reasons.append(
        "The nodes exchange activations every step: connect them with InfiniBand or RoCE (100 Gb/s or more); "
        "tensor parallel stays inside each node, where the GPUs share NVLink or PCIe."
    )
    return reasons


def _memory_reasons(d: Deployment, fraction: float, note: str | None, sequences: int, agent_context: int) -> list[str]:
    s = d.sizing
    max_context = d.model.architecture.max_context
    why_fraction = note or f"the engine may take {fraction:.2f} of each GPU"
    reasons = [
        f"Each GPU: {format_bytes(s.budget)} for the engine ({why_fraction}) = weights {format_bytes(s.weights)} + "
        f"overhead {format_bytes(ENGINE_OVERHEAD)} + KV cache {format_bytes(s.room)}."
    ]
    if d.engine.static_memory_fraction:
        reasons.append(
            f"{d.engine.memory_fraction} {d.memory_fraction:.2f}: SGLang's static pool is weights + KV cache; "
            "activations and CUDA graphs live outside it."
        )
    context = f"{s.context:,} tokens" + (" (the model's full context)" if s.context == max_context else "")
    reasons.append(
        f"{d.engine.context} {s.context}: {context}, with room for {s.full_sequences} requests that long at once "
        f"(at least --sequences {sequences}; shorter requests share the cache, so more run)."
    )
    if s.context < agent_context:
        reasons.append(
            f"Coding agents want {agent_context:,} tokens or more (their system prompt and tools alone take most "
            "of it): this context suits chat and completions; for agents, add GPUs or nodes (--nodes), or lower "
            "--sequences."
        )
    if s.fp8_kv:
        reasons.append(
            f"{d.engine.kv_cache_dtype} {d.kv_cache_dtype}: an FP8 KV cache takes half the memory of a 16-bit one, "
            f"which buys the longer context; Ada and Hopper read it natively, at a small quality cost."
        )
    elif _fp8_compute(d.node) and s.context == max_context:
        reasons.append(
            "KV cache in 16 bits (the model's dtype): it already holds the full context, FP8 would only add room."
        )
    return reasons


def _serving_reasons(d: Deployment, agent_names: tuple[str, ...]) -> list[str]:
    reasons = []
    if d.engine.many_served_names and agent_names:
        reasons.append(
            f"--served-model-name {d.model.id} and the names coding agents ask for by default "
            f"({', '.join(agent_names)}): vLLM answers only the names it serves."
        )
    elif not d.engine.many_served_names:
        reasons.append(
            f"--served-model-name {d.model.id}: SGLang serves one name; give agents that name "
            f"(`launcher connect AGENT --model {d.model.id}`)."
        )
    if d.tool_parser:
        enable = "--enable-auto-tool-choice " if d.engine.auto_tool_choice else ""
        reasons.append(
            f"{enable}--tool-call-parser {d.tool_parser}: turns the {d.model.family} model's tool-call text into "
            "OpenAI tool_calls, which coding agents work through."
        )
    else:
        reasons.append(
            f"No tool-call parser: {d.engine.label} has none for {d.model.family} models, so agents that work "
            "through tools (Claude Code, Codex) will stall; pick a model tagged `tools` for them."
        )
    if d.reasoning_parser:
        reasons.append(
            f"--reasoning-parser {d.reasoning_parser}: the model thinks before it answers; the parser returns "
            "the thinking as reasoning, apart from the answer."
        )
    return reasons
