"""What `launcher handoff` needs to know about vLLM and SGLang: their flag names, images and parsers.

The two engines take the same decisions under different names (`--tensor-parallel-size` vs
`--tp-size`, `--max-model-len` vs `--context-length`). Every flag and parser name here was
checked against the engines' own `--help` (tests/data/engine_help: vLLM 0.32.0, SGLang 0.5.23)
and the image tags name those versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from launcher.catalog.schema import CatalogModel

HandoffEngineName = Literal["vllm", "sglang"]

MultiNode = Literal["ray", "ranks"]
"""How a deployment spans several nodes. "ray": the nodes join a Ray cluster started on the head, and one
server on the head runs over all of them; "ranks": every node runs the server with its rank, the nodes
meet on the head, and the head serves the API."""


@dataclass(frozen=True)
class HandoffEngine:
    """One datacenter engine's spellings."""

    name: HandoffEngineName
    label: str
    program: tuple[str, ...]  # the words before the arguments
    model_flag: str | None  # None: the repo is the first bare word (`vllm serve REPO`)
    tensor_parallel: str
    pipeline_parallel: str
    context: str
    memory_fraction: str
    static_memory_fraction: bool  # the fraction covers weights + KV cache only (SGLang), not the whole footprint
    kv_cache_dtype: str
    fp8_kv: str  # the kv-cache-dtype value for an FP8 cache
    many_served_names: bool  # --served-model-name takes several names
    image: str
    tool_parsers: dict[str, str]  # catalog family (or catalog id) -> parser name
    reasoning_parsers: dict[str, str]
    auto_tool_choice: bool  # tool calls need --enable-auto-tool-choice besides the parser
    help_args: tuple[str, ...]  # the words after the program that print every flag (`launcher handoff --check`)
    multi_node: MultiNode
    multi_node_flags: tuple[str, ...]  # on each server's command over several nodes: {nodes}, {rank}, {head} filled in
    family_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def server_per_node(self) -> bool:
        """Whether each node runs the engine's server (with its rank), not one server on the head."""
        return self.multi_node == "ranks"

    def node_flags(self, nodes: int, rank: int, head: str) -> list[str]:
        """The flags that make the server on node `rank` one of `nodes`, meeting at `head`."""
        return [word.format(nodes=nodes, rank=rank, head=head) for word in self.multi_node_flags]

    def tool_parser(self, model: CatalogModel) -> str | None:
        """The tool-call parser for this model: by catalog id first (Qwen3-Coder's XML calls), then family."""
        return self.tool_parsers.get(model.id, self.tool_parsers.get(model.family))

    def reasoning_parser(self, model: CatalogModel) -> str | None:
        """The reasoning parser, only for models that think aloud (tagged "reasoning" in the catalog)."""
        return self.reasoning_parsers.get(model.family) if "reasoning" in model.tags else None


# Families with no entry have no tool-call format the engine parses: Gemma 3 has no tool tokens
# and Phi-4 (14B) was not trained for tool calls (vLLM's phi4_mini_json is for Phi-4-mini).
VLLM = HandoffEngine(
    name="vllm",
    label="vLLM",
    program=("vllm", "serve"),
    model_flag=None,
    tensor_parallel="--tensor-parallel-size",
    pipeline_parallel="--pipeline-parallel-size",
    context="--max-model-len",
    memory_fraction="--gpu-memory-utilization",
    static_memory_fraction=False,
    kv_cache_dtype="--kv-cache-dtype",
    fp8_kv="fp8",
    many_served_names=True,
    image="vllm/vllm-openai:v0.32.0",
    tool_parsers={
        "qwen3": "hermes",  # Qwen3 and Qwen2.5 emit Hermes-style <tool_call> JSON
        "qwen2.5": "hermes",
        "qwen3-coder-30b-a3b": "qwen3_coder",  # Qwen3-Coder writes XML tool calls
        "llama3": "llama3_json",
        "mistral": "mistral",
        "gpt-oss": "openai",
    },
    reasoning_parsers={"qwen3": "qwen3", "gpt-oss": "openai_gptoss"},
    auto_tool_choice=True,
    help_args=("serve", "--help=all"),  # vLLM folds most flags into sections behind --help=all
    multi_node="ray",
    multi_node_flags=("--distributed-executor-backend", "ray"),  # the Ray cluster the nodes joined
    # Mistral's own repos ship tekken.json and consolidated weights; the model cards serve them in that format.
    family_flags={
        "mistral": ("--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral"),
    },
)

SGLANG = HandoffEngine(
    name="sglang",
    label="SGLang",
    program=("sglang", "serve"),
    model_flag="--model-path",
    tensor_parallel="--tp-size",
    pipeline_parallel="--pp-size",
    context="--context-length",
    memory_fraction="--mem-fraction-static",
    static_memory_fraction=True,
    kv_cache_dtype="--kv-cache-dtype",
    fp8_kv="fp8_e4m3",
    many_served_names=False,
    image="lmsysorg/sglang:v0.5.23",
    tool_parsers={
        "qwen3": "qwen",  # SGLang's Qwen 2.5/3 detector (also registered as qwen25)
        "qwen2.5": "qwen",
        "qwen3-coder-30b-a3b": "qwen3_coder",
        "llama3": "llama3",
        "mistral": "mistral",
        "gpt-oss": "gpt-oss",
    },
    reasoning_parsers={"qwen3": "qwen3", "gpt-oss": "gpt-oss"},
    auto_tool_choice=False,  # SGLang turns tool calls on with --tool-call-parser alone
    help_args=("serve", "--help"),
    multi_node="ranks",
    # The nodes meet on the head at port 5000 (--dist-init-addr HEAD:PORT).
    multi_node_flags=("--nnodes", "{nodes}", "--node-rank", "{rank}", "--dist-init-addr", "{head}:5000"),
)

HANDOFF_ENGINES: dict[str, HandoffEngine] = {VLLM.name: VLLM, SGLANG.name: SGLANG}
