"""SGLang as the registry knows it: its own OpenAI-compatible server, run as a supervised child.

`launcher serve MODEL --engine sglang` starts SGLang's server on a free loopback port (a catalog id as
`launcher handoff sglang` plans it for this machine) and serves it through the launcher's endpoint.
SGLang takes its key only as a flag, and exports /metrics (the app's gauges) only when asked.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.child import ChildArguments, ChildLaunch, ChildRequest


def sglang_program() -> list[str] | None:
    """The words that start SGLang's server here: this Python when it can import SGLang (every version
    has `sglang.launch_server`), else its own command on PATH."""
    if importlib.util.find_spec("sglang") is not None:
        return [sys.executable, "-m", "sglang.launch_server"]
    if shutil.which("sglang"):
        return ["sglang", "serve"]
    return None


def sglang_arguments(request: ChildRequest) -> ChildArguments:
    """SGLang's words for a request, from the hand-off's table of its flags and parsers."""
    from launcher.advisor.handoff_engines import SGLANG
    from launcher.engines.child.handoff_words import handoff_arguments

    return handoff_arguments(SGLANG, request)


SPEC = EngineSpec(
    name="sglang",
    label="SGLang",
    formats=("safetensors",),
    factory="launcher.engines.child.engine:ChildEngine",
    runtime_module="sglang",
    distribution="sglang",
    pip_extra="sglang",
    tensor_parallel=True,
    sliding_cache="window",
    runs_as="child",
    child=ChildLaunch(
        metric_series={
            "sglang:num_running_reqs": "running",
            "sglang:num_queue_reqs": "waiting",
            "sglang:num_used_tokens": "kv_used",
            "sglang:max_total_num_tokens": "kv_total",
            "sglang:gen_throughput": "decode_tps",
            "sglang:prompt_tokens_total": "prompt_total",
            "sglang:generation_tokens_total": "generation_total",
            "sglang:token_usage": "kv_ratio",
        },
        program=sglang_program,
        arguments=sglang_arguments,
        looked_for="neither `sglang` on PATH nor the sglang package in this Python",
        install=(
            'it runs on NVIDIA GPUs: install it there (`pip install "sglang[all]"`, or in a venv of its own with '
            "its command on PATH)"
        ),
        advice=(
            ", or plan a deployment with `launcher handoff sglang MODEL`. Without it, `launcher serve MODEL` "
            "runs the model with llama.cpp."
        ),
        extra_flags=("--enable-metrics",),
    ),
)
