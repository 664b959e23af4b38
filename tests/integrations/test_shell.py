"""Shell snippets paste cleanly into bash/zsh, fish and PowerShell, even with awkward values."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from launcher.integrations import Endpoint, get_agent
from launcher.integrations.setup import export_line

AWKWARD = "it's a $key with \\ and spaces"


def test_bash_snippet_exports_and_ends_with_the_command() -> None:
    setup = get_agent("aider").setup_for(Endpoint("http://127.0.0.1:8420/v1", "sk-1", "m", 32768))
    assert setup.shell_snippet("bash").splitlines() == [
        "export OPENAI_API_BASE=http://127.0.0.1:8420/v1",
        "export OPENAI_API_KEY=sk-1",
        "aider --model openai/m",
    ]


def test_fish_and_powershell_syntax() -> None:
    assert export_line("A", "x", "fish") == "set -gx A 'x'"
    assert export_line("A", "x", "powershell") == "$env:A = 'x'"
    assert export_line("A", "it's", "powershell") == "$env:A = 'it''s'"
    assert export_line("A", "it's", "fish") == "set -gx A 'it\\'s'"


def test_bash_quoting_round_trips_through_a_real_shell() -> None:
    line = export_line("LAUNCHER_T", AWKWARD, "bash")
    out = subprocess.run(["bash", "-c", f'{line}\nprintf %s "$LAUNCHER_T"'], capture_output=True, text=True, check=True)
    assert out.stdout == AWKWARD


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed on this machine")
def test_fish_quoting_round_trips_through_a_real_shell() -> None:
    line = export_line("LAUNCHER_T", AWKWARD, "fish")
    out = subprocess.run(["fish", "-c", f'{line}; printf %s "$LAUNCHER_T"'], capture_output=True, text=True, check=True)
    assert out.stdout == AWKWARD


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="PowerShell is not installed on this machine")
def test_powershell_quoting_round_trips_through_a_real_shell() -> None:
    line = export_line("LAUNCHER_T", AWKWARD, "powershell")
    out = subprocess.run(
        ["pwsh", "-NoProfile", "-Command", f"{line}; [Console]::Write($env:LAUNCHER_T)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == AWKWARD


def test_unknown_shell_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown shell"):
        export_line("A", "x", "cmd")  # type: ignore[arg-type]
