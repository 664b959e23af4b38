"""vLLM or SGLang as a child server of `launcher serve MODEL --engine vllm|sglang`.

The datacenter engines bring their own OpenAI-compatible servers, so the launcher does not load
them in-process behind `engines.base.Engine`: it starts the engine's server as a supervised
child on a free loopback port with a random key of its own, waits for its /health, and serves
it through its own endpoint as an upstream (server/remote_chat.py). Agents then see one server,
with the launcher's key, names and aliases, and its Anthropic Messages and Responses APIs
translated to the Chat Completions the child speaks. The child stops with the server, and ends
when the server dies (Linux).

`child_command` is the one place the child's command line is built; a check that runs a real
engine (scripts/check-vllm with vLLM's CPU build) can build the same command with its own
`program`.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import httpx

from launcher.core.child_process import arm_parent_death_signal
from launcher.core.config import CHILD_ENGINES
from launcher.core.errors import CatalogError, ConfigError, EngineError, EngineUnavailableError
from launcher.core.net import free_port

if TYPE_CHECKING:
    from launcher.advisor.handoff_engines import HandoffEngine
    from launcher.catalog.schema import CatalogModel
    from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 1800.0
"""How long a child may take to answer /health: vLLM downloads the weights and compiles its graphs first."""
STOP_TIMEOUT_S = 20.0
"""How long a stopping child may take to exit before it is killed (vLLM frees the GPU on SIGTERM)."""
TAIL_LINES = 40
"""The child's last output lines kept for the error when it fails."""

# A local model folder's config.json `model_type` -> the catalog family the engines' parsers are listed under.
_FAMILIES = {
    "qwen2": "qwen2.5",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "llama": "llama3",
    "mistral": "mistral",
    "gpt_oss": "gpt-oss",
}


@dataclass(frozen=True)
class ChildCommand:
    """How to start the child."""

    argv: list[str]
    env: dict[str, str]  # added to the environment: the key, where the engine reads it there (not in `ps`)
    served_name: str  # the model's id at the child (and this server's name for it)


def engine_program(engine: str) -> list[str] | None:
    """The words that start `engine`'s server here, or None when it is not installed.

    The engine's own command on PATH first (a venv or pipx of its own), else this Python when it
    can import the engine.
    """
    if engine == "vllm":
        if shutil.which("vllm"):
            return ["vllm", "serve"]
        if importlib.util.find_spec("vllm") is not None:
            return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    elif engine == "sglang":
        if importlib.util.find_spec("sglang") is not None:
            return [sys.executable, "-m", "sglang.launch_server"]  # every SGLang version has it
        if shutil.which("sglang"):
            return ["sglang", "serve"]
    return None


def missing_engine(engine: str) -> EngineUnavailableError:
    """The error for an engine that is not installed, saying how to get it."""
    label, package = ("vLLM", "vllm") if engine == "vllm" else ("SGLang", '"sglang[all]"')
    return EngineUnavailableError(
        f"--engine {engine} runs {label} as a child server, and {label} is not installed here: neither "
        f"`{engine}` on PATH nor the {engine} package in this Python. It runs on NVIDIA GPUs: install it "
        f"there (`pip install {package}`, or in a venv of its own with its command on PATH), or plan a "
        f"deployment with `launcher handoff {engine} MODEL`. Without it, `launcher serve MODEL` runs the "
        "model with llama.cpp."
    )


def _flag_set(words: list[str], flag: str, *values: str) -> list[str]:
    """`words` with `flag`'s values replaced by `values` (added when the flag is not there)."""
    if flag not in words:
        return [*words, flag, *values]
    start = words.index(flag)
    end = start + 1
    while end < len(words) and not words[end].startswith("--"):
        end += 1
    return [*words[: start + 1], *values, *words[end:]]


def _flag_removed(words: list[str], flag: str) -> list[str]:
    if flag not in words:
        return words
    start = words.index(flag)
    return [*words[:start], *words[start + 2 :]]


def _catalog_model(model: str) -> CatalogModel | None:
    from launcher.catalog.catalog import find

    try:
        return find(model)
    except CatalogError:
        return None


def _family(model: str) -> str | None:
    """The chat family of a model folder (its config.json) or a Hub repo the catalog lists."""
    folder = Path(model).expanduser()
    config = folder / "config.json"
    if config.is_file():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return _folder_family(folder, str(json.loads(config.read_text(encoding="utf-8")).get("model_type")))
        return None
    from launcher.catalog.catalog import default_catalog

    for entry in default_catalog().models:
        repos = {entry.upstream_repo, *(variant.repo for variant in entry.safetensors.values())}
        if model in repos:
            return entry.family
    return None


def _chat_template(folder: Path) -> str:
    """The folder's chat template text ("" when it has none)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    tokenizer_config = folder / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return ""
    template = json.loads(tokenizer_config.read_text(encoding="utf-8")).get("chat_template") or ""
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        return "\n".join(str(item.get("template", "")) for item in template if isinstance(item, dict))
    return str(template)


def _folder_family(folder: Path, model_type: str) -> str | None:
    """The parser family of a model folder, from what its chat template writes for a tool call.

    The architecture alone misleads: a Llama fine-tune with a ChatML template calls tools in
    `<tool_call>` tags, and vLLM refuses to start its llama3_json parser on a tokenizer without
    Llama 3's `<|python_tag|>`.
    """
    template = _chat_template(folder)
    if "<tool_call>" in template:
        return "qwen3"  # Hermes-style calls: the Qwen family's parser reads them
    family = _FAMILIES.get(model_type)
    if family == "llama3" and "<|python_tag|>" not in template:
        return None
    return family


def _planned_words(engine: str, model: CatalogModel, port: int, api_key: str, machine: Machine | None) -> list[str]:
    """The hand-off's plan for this machine (weights, tensor parallel, context, memory, parsers)."""
    from launcher.advisor.handoff import plan_handoff
    from launcher.advisor.handoff_sizing import Node

    if machine is None:
        from launcher.hardware.probe import probe_machine

        machine = probe_machine()
    deployment = plan_handoff(engine, model, Node.of(machine), api_key=api_key, nodes=1, port=port)
    return deployment.arguments(api_key=api_key)


def _plain_words(spec: HandoffEngine, model: str, served_name: str, port: int, api_key: str) -> list[str]:
    """A folder or Hub repo the catalog does not plan: the engine's defaults, and its family's parsers."""
    path = Path(model).expanduser()
    source = str(path.resolve()) if path.exists() else model
    words = [source] if spec.model_flag is None else [spec.model_flag, source]
    words += ["--served-model-name", served_name, "--port", str(port)]
    family = _family(model)
    parser = spec.tool_parsers.get(family or "")
    if parser:
        words += ["--enable-auto-tool-choice"] if spec.auto_tool_choice else []
        words += ["--tool-call-parser", parser]
    return [*words, "--api-key", api_key]


def _cpu_kv_cache(machine: Machine | None) -> dict[str, str]:
    """vLLM's CPU build sizes its KV cache as --gpu-memory-utilization of all RAM (0.9) unless
    VLLM_CPU_KVCACHE_SPACE (GiB) says otherwise, which starves the machine and the launcher with it:
    on a machine without a GPU, give it a quarter of the free RAM (at least 1 GiB) unless it is set."""
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {}
    if machine is None:
        from launcher.hardware.probe import probe_machine

        machine = probe_machine()
    if machine.gpus or machine.apple is not None:
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(max(1, machine.memory.available // 4 // 2**30))}


def child_command(
    engine: str,
    model: str,
    *,
    port: int,
    api_key: str,
    served_name: str | None = None,
    context: int | None = None,
    host: str = "127.0.0.1",
    program: Sequence[str] | None = None,
    machine: Machine | None = None,
) -> ChildCommand:
    """The command that serves `model` with `engine` ("vllm" or "sglang") on host:port behind `api_key`.

    A catalog id is served as `launcher handoff` plans it for this machine (`machine`: probed when
    None): the checkpoint, tensor parallelism, context, memory fraction and the family's tool-call
    and reasoning parsers. A model folder or Hub repo is served with the engine's defaults and, when
    its family is known, its tool-call parser (agents send tools with every request). `context` sets
    the context length; `program` replaces the words that start the engine (default:
    `engine_program`). vLLM reads the key from VLLM_API_KEY, so it stays out of the process list;
    SGLang takes it only as a flag.
    """
    from launcher.advisor.handoff_engines import HANDOFF_ENGINES

    if engine not in CHILD_ENGINES:
        raise ConfigError(
            f"{engine!r} is not an engine the launcher runs as a child server: {', '.join(CHILD_ENGINES)}"
        )
    spec = HANDOFF_ENGINES[engine]
    words_of = program if program is not None else engine_program(engine)
    if words_of is None:
        raise missing_engine(engine)
    catalog_model = _catalog_model(model)
    if catalog_model is not None:
        name = served_name or catalog_model.id
        words = _planned_words(engine, catalog_model, port, api_key, machine)
        words = _flag_set(words, "--served-model-name", name)
    else:
        name = served_name or Path(model.rstrip("/")).name or model
        words = _plain_words(spec, model, name, port, api_key)
    words = _flag_set(words, "--host", host)  # loopback: only this server talks to it
    if context is not None:
        words = _flag_set(words, spec.context, str(context))
    env: dict[str, str] = {}
    if engine == "vllm":
        words = _flag_removed(words, "--api-key")
        env["VLLM_API_KEY"] = api_key
        env |= _cpu_kv_cache(machine)
    else:
        words.append("--enable-metrics")  # SGLang exports /metrics (the app's gauges) only when asked
    return ChildCommand([*words_of, *words], env, name)


class ChildServer:
    """A running engine server: started in its own process group, its output passed to our stderr
    (and its last lines kept for errors), stopped with its whole group."""

    def __init__(self, engine: str, command: ChildCommand, port: int, api_key: str, host: str = "127.0.0.1") -> None:
        self.engine = engine
        self.command = command
        self.port = port
        self.api_key = api_key
        self.host = host
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.process: subprocess.Popen[str] | None = None
        self._stopping = False

    @property
    def base_url(self) -> str:
        """The child's OpenAI base URL."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def served_name(self) -> str:
        """The model's id at the child."""
        return self.command.served_name

    def start(self, echo: IO[str] | None = None) -> None:
        """Start the child (from the main thread: Linux ties the child's death signal to the starting thread)."""
        linux = sys.platform.startswith("linux")
        self.process = subprocess.Popen(
            self.command.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, **self.command.env},
            start_new_session=sys.platform != "win32",  # its own group: its workers stop with it
            preexec_fn=arm_parent_death_signal if linux else None,  # only prctl runs in it, before exec
        )
        threading.Thread(target=self._pump, args=(echo or sys.stderr,), daemon=True).start()

    def _pump(self, echo: IO[str]) -> None:
        """Pass the child's output on (its progress is the user's to see) and keep its tail."""
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.tail.append(line.rstrip())
            with contextlib.suppress(OSError, ValueError):
                echo.write(f"[{self.engine}] {line}")
                echo.flush()

    def exited(self) -> int | None:
        """The child's exit code once it has exited (None while it runs)."""
        return self.process.poll() if self.process is not None else None

    def failure(self, what: str) -> EngineError:
        """An error about the child with its last output lines."""
        tail = "\n".join(list(self.tail)[-12:])
        return EngineError(f"{what}. Its last output:\n{tail}" if tail else what)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, cancelled: Callable[[], bool] = lambda: False) -> None:
        """Block until the child's /health answers 200; an EngineError when it exits or times out first."""
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.host}:{self.port}/health"
        while True:
            code = self.exited()
            if code is not None:
                raise self.failure(f"{self.engine} exited with code {code} before it was ready")
            if cancelled():
                return
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise self.failure(f"{self.engine} did not answer {url} within {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the child's group, then SIGKILL if it has not exited within `timeout_s`."""
        process = self.process
        if process is None or self._stopping:
            return
        self._stopping = True
        if process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL if sys.platform != "win32" else signal.SIGTERM)
                process.wait(timeout=timeout_s)
        if sys.platform != "win32":  # workers it left behind in its group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        assert self.process is not None
        if sys.platform == "win32":
            self.process.terminate()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


def start_child(engine: str, model: str, *, served_name: str | None = None, context: int | None = None) -> ChildServer:
    """Start `engine` serving `model` on a free loopback port with a new random key (raises at once when the
    engine is not installed or the model cannot be planned)."""
    port = free_port()
    api_key = secrets.token_urlsafe(24)
    command = child_command(engine, model, port=port, api_key=api_key, served_name=served_name, context=context)
    child = ChildServer(engine, command, port, api_key)
    log.info("starting %s: %s", engine, " ".join(command.argv))
    child.start()
    return child
