"""A child engine's command line: the engine's own words (its spec), then the host, context and key.

`child_command` is the one place it is built; a check that runs a real engine (scripts/check-vllm
with vLLM's CPU build) can build the same command with its own `program`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.core.errors import ConfigError, EngineUnavailableError
from launcher.engine_specs import EngineSpec, get_spec
from launcher.engine_specs.child import ChildLaunch, ChildRequest

if TYPE_CHECKING:
    from launcher.hardware.machine import Machine


@dataclass(frozen=True)
class ChildCommand:
    """How to start the child."""

    argv: list[str]
    env: dict[str, str]  # added to the environment: the key, where the engine reads it there (not in `ps`)
    served_name: str  # the model's id at the child (and this server's name for it)


def launch_of(spec: EngineSpec) -> ChildLaunch:
    """The spec's launch; a ConfigError for an engine that runs in this process."""
    if spec.child is None:
        raise ConfigError(f"{spec.name!r} is not an engine the launcher runs as a child server")
    return spec.child


def missing_engine(spec: EngineSpec) -> EngineUnavailableError:
    """The error for a child engine that is not installed here, saying how to get it."""
    launch = launch_of(spec)
    install = launch.install[:1].upper() + launch.install[1:]
    return EngineUnavailableError(
        f"--engine {spec.name} runs {spec.label} as a child server, and {spec.label} is not installed here: "
        f"{launch.looked_for}. {install}{launch.advice}"
    )


def flag_set(words: list[str], flag: str, *values: str) -> list[str]:
    """`words` with `flag`'s values replaced by `values` (added when the flag is not there)."""
    if flag not in words:
        return [*words, flag, *values]
    start = words.index(flag)
    end = start + 1
    while end < len(words) and not words[end].startswith("--"):
        end += 1
    return [*words[: start + 1], *values, *words[end:]]


def flag_removed(words: list[str], flag: str) -> list[str]:
    """`words` without `flag` and its value."""
    if flag not in words:
        return words
    start = words.index(flag)
    return [*words[:start], *words[start + 2 :]]


def build_command(spec: EngineSpec, request: ChildRequest, program: Sequence[str] | None = None) -> ChildCommand:
    """The command that serves `request` with the child engine `spec` (`program`: the words that start
    it, default: the spec's, found here; an EngineUnavailableError when there are none)."""
    launch = launch_of(spec)
    words_of = list(program) if program is not None else launch.program()
    if words_of is None:
        raise missing_engine(spec)
    arguments = launch.arguments(request)
    words = flag_set(arguments.words, launch.host_flag, request.host)  # loopback: only this server talks to it
    if request.context is not None and arguments.context_flag is not None:
        words = flag_set(words, arguments.context_flag, str(request.context))
    env: dict[str, str] = {}
    if launch.key_env is not None:
        words = flag_removed(words, launch.key_flag)
        env[launch.key_env] = request.api_key
    else:
        words = flag_set(words, launch.key_flag, request.api_key)
    words += [flag for flag in launch.extra_flags if flag not in words]
    env |= launch.extra_env(request)
    return ChildCommand([*words_of, *words], env, arguments.served_name)


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
    """The command that serves `model` with the child engine named `engine` on host:port behind `api_key`
    (see `build_command`; `machine`: the machine it plans for, probed when None)."""
    request = ChildRequest(model, port, api_key, served_name, context, host, machine)
    return build_command(get_spec(engine), request, program)
