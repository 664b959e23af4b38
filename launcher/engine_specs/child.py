"""How an engine that runs as a child process is launched: what its spec says, and nothing that runs it.

An engine with `runs_as="child"` brings its own OpenAI-compatible server (vLLM, SGLang, a plug-in).
`launcher serve MODEL --engine NAME` starts that server as a supervised child on a free loopback port
with a random key of its own and serves it through the launcher's endpoint (launcher/engines/child/).
Its spec carries a `ChildLaunch`: where its program is found here, the engine's own words for a model,
its served name and port, and how it takes the host, the context length and the key. The generic part
(the host, the context, the key, extra flags) is applied by `launcher.engines.child.command`, the one
place a child's command line is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.hardware.machine import Machine


@dataclass(frozen=True)
class ChildRequest:
    """What a child engine is asked to serve, and where."""

    model: str  # as the user named it: a catalog id, a Hub repo, a folder or a file
    port: int
    api_key: str
    served_name: str | None = None  # the id clients see (default: the engine's choice for the model)
    context: int | None = None  # the context length (default: the engine's)
    host: str = "127.0.0.1"  # loopback: only the launcher's server talks to it
    machine: Machine | None = None  # the machine it plans for (None: probed when needed)


@dataclass(frozen=True)
class ChildArguments:
    """An engine's own words for a request (after its program), before the generic flags are applied."""

    words: list[str]  # the model, its served name, the port, the engine's parsers and tuning
    served_name: str  # the model's id at the child (and the launcher's name for it)
    context_flag: str | None = None  # the flag that sets the context length (None: it has none)


def no_extra_env(request: ChildRequest) -> dict[str, str]:
    """The default: the child needs no environment of its own beyond the key."""
    del request
    return {}


@dataclass(frozen=True)
class ChildLaunch:
    """How to launch one child engine."""

    program: Callable[[], list[str] | None]  # the words that start its server here; None: not found here
    arguments: Callable[[ChildRequest], ChildArguments]  # its own words for a request
    looked_for: str  # what `program` did not find, for the error ("neither `vllm` on PATH nor ...")
    install: str  # how to get it, for that error and `launcher detect` ("install it with ...")
    advice: str = ""  # what else to do without it, for that error
    host_flag: str = "--host"
    key_flag: str = "--api-key"  # the flag that takes the key when `key_env` is None
    key_env: str | None = None  # the environment variable it reads its key from (kept out of `ps`)
    extra_flags: tuple[str, ...] = ()  # always added (SGLang exports /metrics only when asked)
    extra_env: Callable[[ChildRequest], dict[str, str]] = field(default=no_extra_env)
    # Its /metrics series the app's gauges read, by the gauge each feeds: "running", "waiting", "kv_used",
    # "kv_total", "decode_tps", "prefill_tps", "prompt_total", "generation_total" (summed over its
    # models), "kv_ratio" (the highest). Read from any server that exports them: a child or a remote.
    metric_series: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"  # answers 200 once it serves
    ready_timeout_s: float = 1800.0  # how long it may take to get there (vLLM downloads and compiles first)
