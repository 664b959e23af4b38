"""The `launcher` command: `[gui] | detect | recommend | models | pull | search | serve | ps | bench | ...`.

`launcher --help` lists them all (COMMANDS below).

Each subcommand is a module of this package exposing `add_arguments(parser)` and
`run(args) -> int`; it is imported only when its command runs (so `launcher gui` does not pay
for the server's imports), and modules keep heavy imports inside `run` so `launcher --help`
stays fast. The CLI is the top layer: it may import every other package, and none imports it.
Errors from `core.errors` become one clear line on stderr and a non-zero exit code, never a
traceback; so does a reader that stops reading early (`launcher models | head -1`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from types import ModuleType

from launcher.core.errors import LauncherError
from launcher.core.paths import is_frozen
from launcher.updates.current import current_version


def _module(name: str) -> ModuleType:
    """The subcommand's module, `launcher/cli/<name>.py`, imported when its command runs. (A freezer
    cannot follow a name built at run time; packaging/launcher.spec bundles every launcher module.)"""
    return import_module(f"launcher.cli.{name.replace('-', '_')}")


# name -> one-line help
COMMANDS: dict[str, str] = {
    "gui": "open the desktop app (the default)",
    "detect": "show what this machine has",
    "recommend": "recommend engine, format and quant for a model",
    "models": "list, add or remove local models",
    "pull": "download a model from the Hugging Face Hub",
    "search": "search the Hugging Face Hub with fit verdicts",
    "serve": "serve a model on an OpenAI/Anthropic-compatible endpoint",
    "bench": "benchmark an OpenAI-compatible endpoint",
    "connect": "show or write a coding agent's settings",
    "launch": "run a coding agent wired to a local server (started for the run when none is running)",
    "gpu-pack": "list, install or remove the GPU backends of llama.cpp (CUDA, Vulkan)",
    "ps": "list the models a running server has loaded, or unload one",
    "handoff": "turn the plan into a vLLM or SGLang deployment for bigger machines",
    "remote": "add, list or remove OpenAI-compatible endpoints whose models the server serves as NAME/model",
    "cache": "list or clear the prompt cache on disk (prompt prefixes kept across server restarts)",
    "mcp": "list the Chat page's MCP servers (mcp.json) and, with --tools, the tools they offer",
    "update": "check for a new version of the app and install it",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. Only `command`'s module is imported (all of them when None), so
    `launcher gui` does not pay for the server's or the bench's imports before its window shows."""
    parser = argparse.ArgumentParser(prog="launcher", description=__doc__.splitlines()[0])
    # The build's version when frozen (build_info.json), which the updater's check of a new build reads.
    parser.add_argument("--version", action="version", version=f"launcher {current_version()}")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default), ERROR")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text)
        if command is not None and name != command:
            continue
        module = _module(name)
        module.add_arguments(subparser)
        subparser.set_defaults(_run=module.run)
    return parser


def _run_internal(name: str, arguments: list[str]) -> int:
    """Hidden commands (`launcher _NAME ...`): work the launcher hands to a child process of itself,
    started with `core.child_process.launcher_command()`. They are not in `--help` and take no
    options. Each is imported by name here, like the subcommands above, so a freezer bundles it
    and the frozen app can run it: it has no Python to run a `-c` script with."""
    if name == "_llamacpp-cpu-probe":
        from launcher.engines.llamacpp import _cpu_probe

        return _cpu_probe.run_probe(arguments)
    if name == "_probe-gpu-pack":
        from launcher.engines.llamacpp import _backend_probe

        return _backend_probe.run_probe(arguments)
    print(f"launcher: unknown internal command {name!r}", file=sys.stderr)
    return 2


PASSTHROUGH_COMMANDS = ("launch",)
PASSTHROUGH_DEST = "agent_args"
"""`launcher launch AGENT -- ARGS`: the words after `--` are the agent's, all of them, even ones that
look like our options or would fill our optional MODEL; argparse would parse them as ours."""


def _split_passthrough(words: list[str], command: str | None) -> tuple[list[str], list[str] | None]:
    if command not in PASSTHROUGH_COMMANDS or "--" not in words:
        return words, None
    cut = words.index("--")
    return words[:cut], words[cut + 1 :]


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv (the first bare word that is one), or None."""
    return next((word for word in argv if word in COMMANDS), None)


# 128 + SIGPIPE: what a shell reports for a writer whose reader left (`yes | head`), so scripts
# can tell "the reader stopped early" from our errors (1, 2).
READER_LEFT_EXIT_CODE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    try:
        code = _dispatch(argv)
        if sys.stdout is not None:  # None in a windowed app
            sys.stdout.flush()  # here, where a closed pipe can still be caught, not at the interpreter's exit
        return code
    except BrokenPipeError:
        return _reader_left()


def _reader_left() -> int:
    """Our stdout's reader closed it early, as `head` does. Python ignores SIGPIPE (so that the
    server's sockets get an error, not a kill), which turns every later write into BrokenPipeError;
    that is the reader's choice, not our error. Pointing stdout at devnull keeps the interpreter's
    final flush of what is still buffered from raising it once more, as the note on SIGPIPE in
    Python's `signal` docs does. Only a BrokenPipeError that leaves the command lands here: the
    server handles its own clients' closed sockets and never gets this far."""
    with contextlib.suppress(OSError, ValueError):  # stdout has no descriptor (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return READER_LEFT_EXIT_CODE


def _finish_pending_update() -> None:
    """Remove what a finished update left beside this installation (the previous version's folder),
    on the first start of the new version, `--version` included (the updater's own check of it)."""
    from launcher.updates.install import finish_pending_update

    with contextlib.suppress(Exception):  # only disk space is at stake, never the command
        finish_pending_update()


def _dispatch(argv: Sequence[str] | None) -> int:
    """Run the command line's command; returns its exit code."""
    from launcher.core import logging as launcher_logging

    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0].startswith("_"):
        launcher_logging.setup("WARNING")
        return _run_internal(words[0], words[1:])
    command = _command_in(words)
    if command is None and not any(w in ("-h", "--help", "--version") for w in words):
        words, command = ["gui", *words], "gui"  # a double-click or a bare `launcher` opens the app
    if command != "gui" and is_frozen():  # the window does it itself, off its UI thread
        _finish_pending_update()
    words, passthrough = _split_passthrough(words, command)
    args = build_parser(command).parse_args(words)
    if passthrough is not None:
        setattr(args, PASSTHROUGH_DEST, passthrough)
    launcher_logging.setup(args.log_level)
    try:
        code: int = args._run(args)
        return code
    except LauncherError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
