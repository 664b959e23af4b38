"""`launcher connect AGENT`: print (or write) what a coding agent needs to use the local server.

    launcher connect --list
    launcher connect claude-code                 # env exports for your shell + settings file content
    launcher connect codex --dry-run             # the diff --write would apply to ~/.codex/config.toml
    launcher connect opencode --write --test     # write the config (with a backup), then a live test

Without --base-url it asks a running server for the model and context length: the one on the default
port, else the newest `launcher serve` on any port.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.integrations.endpoint import Endpoint
    from launcher.integrations.setup import AgentSetup, Shell

SHELL_CHOICES = ("bash", "zsh", "fish", "powershell")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `launcher connect`."""
    from launcher.integrations.agents import AGENTS

    parser.add_argument("agent", nargs="?", help=", ".join(AGENTS))
    parser.add_argument("--list", action="store_true", help="list the agents the launcher can connect")
    parser.add_argument(
        "--base-url", help="OpenAI-style base URL (default: the running server on the default port, else the newest)"
    )
    parser.add_argument("--api-key", help="the server's API key (default: $LAUNCHER_API_KEY, else none)")
    parser.add_argument("--model", help="model id (default: the first model the server lists)")
    parser.add_argument("--context", type=int, help="the server's context length (default: what the server reports)")
    parser.add_argument("--shell", choices=SHELL_CHOICES, help="shell for the env snippet (default: guessed)")
    parser.add_argument("--write", action="store_true", help="write the agent's config file (old one backed up)")
    parser.add_argument("--dry-run", action="store_true", help="show the diff --write would apply, write nothing")
    parser.add_argument("--test", action="store_true", help="make a real call the way the agent does and report")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds each --test request may take (default: 60)"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run(args: argparse.Namespace) -> int:
    """Run `launcher connect`."""
    from launcher.core.errors import ConfigError
    from launcher.integrations.agents import AGENTS, get_agent

    if args.list or not args.agent:
        if not args.list:
            print("error: name an agent, or use --list", file=sys.stderr)
        for agent in AGENTS.values():
            target = f"writes ~/{agent.config_file}" if agent.config_file else "settings entered by hand"
            print(f"  {agent.id:12} {agent.name:12} needs {agent.min_context // 1024}k context; {target}")
            print(f"  {'':12} {agent.summary}")
        return 0 if args.list else 2
    if args.write and args.dry_run:
        raise ConfigError("use either --write or --dry-run, not both")
    agent = get_agent(args.agent)
    endpoint = _resolve_endpoint(args)
    setup = agent.setup_for(endpoint)
    if args.json and not (args.write or args.dry_run or args.test):
        print(setup.to_json())
        return 0
    if not args.json:
        _print_setup(setup, _shell(args.shell))
    code = 0
    if args.write or args.dry_run:
        code = _write(setup, dry_run=args.dry_run, as_json=args.json)
    if args.test:
        from launcher.integrations.live_test import run_live_test

        report = run_live_test(endpoint, agent, timeout=args.timeout)
        print(json.dumps(report.as_dict(), indent=2) if args.json else "\n" + str(report))
        code = code or (0 if report.ok else 1)
    return code


def _resolve_endpoint(args: argparse.Namespace) -> Endpoint:
    from launcher.integrations.endpoint import Endpoint, discover_endpoint

    api_key = args.api_key or os.environ.get("LAUNCHER_API_KEY") or None
    if args.base_url and args.model:
        # Everything given: don't require the server to be up (e.g. writing config before starting it).
        return Endpoint(args.base_url, api_key, args.model, args.context)
    return discover_endpoint(args.base_url, api_key, args.model, args.context)


def _shell(choice: str | None) -> Shell:
    if choice in ("fish", "powershell"):
        return "fish" if choice == "fish" else "powershell"
    if choice in ("bash", "zsh"):
        return "bash"  # zsh takes the same export lines
    if os.name == "nt":
        return "powershell"
    return "fish" if os.environ.get("SHELL", "").endswith("fish") else "bash"


def _print_setup(setup: AgentSetup, shell: Shell) -> None:
    context = f"{setup.context_length:,}" if setup.context_length else "unknown"
    print(f"# {setup.agent_name}  (docs: {setup.docs_url})")
    print(f"# context: {context} tokens, the agent needs {setup.min_context:,}")
    if setup.env or setup.command:
        print(f"\n## Environment ({shell})\n{setup.shell_snippet(shell)}")
    for edit in setup.config_edits:
        print(f"\n## ~/{edit.relative_path}  ({edit.description}; merged with what is there)")
        print(edit.fragment_text().rstrip())
    if not setup.has_writer and setup.fields:
        print("\n## Enter in the agent's settings")
        for field in setup.fields:
            print(f"  {field.label}: {field.value}")
    if setup.warnings or setup.notes:
        print()
    for warning in setup.warnings:
        print(f"warning: {warning}")
    for note in setup.notes:
        print(f"note: {note}")


def _write(setup: AgentSetup, *, dry_run: bool, as_json: bool) -> int:
    from launcher.integrations.writer import apply_edit

    if not setup.has_writer:
        print(f"\n{setup.agent_name} has no config file the launcher can write; enter the values above instead.")
        return 1
    results = [apply_edit(edit, home=Path.home(), dry_run=dry_run) for edit in setup.config_edits]
    for result in results:
        if as_json:
            print(
                json.dumps(
                    {
                        "path": str(result.path),
                        "written": result.written,
                        "backup": str(result.backup) if result.backup else None,
                        "diff": result.diff,
                    }
                )
            )
        elif dry_run:
            print(f"\n## --dry-run: changes to {result.path}\n{result.diff or '(no change)'}")
        else:
            print(f"\n{result}")
    return 0
