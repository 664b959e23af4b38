"""Finding installed agents: real programs on a made-up PATH and HOME that print versions, or hang."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from launcher.integrations import AGENTS
from launcher.integrations.agents.base import Agent, Install
from launcher.integrations.installed import installed_agents, parse_version, search_path, usual_bin_dirs

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the fake programs are POSIX shell scripts")


def program(folder: Path, name: str, body: str) -> Path:
    """An executable shell script `name` in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def agent(agent_id: str, binary: str | None, package: str = "some-agent") -> Agent:
    """A registry agent with this program name (whatever the real module says)."""
    return replace(AGENTS[agent_id], binary=binary, install=Install("npm", package))


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("2.1.332 (Claude Code)\n", "2.1.332"),
        ("codex-cli 0.171.0\n", "0.171.0"),
        ("aider 0.86.2\n", "0.86.2"),
        ("v20.11.1\n", "20.11.1"),
        ("\x1b[32m1.5.47\x1b[0m\n", "1.5.47"),
        ("opencode 1.0.0-beta.3+build.7\n", "1.0.0-beta.3+build.7"),
        ("no version here\n", None),
        ("", None),
    ],
)
def test_parse_version(text: str, version: str | None) -> None:
    assert parse_version(text) == version


def test_found_programs_report_versions_and_missing_ones_their_install_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    program(bin_dir, "fake-claude", "echo '2.1.332 (Claude Code)'")
    # Codex says a warning first; its version is on stdout.
    program(bin_dir, "fake-codex", "echo 'WARNING: proceeding' >&2; echo 'codex-cli 0.171.0'")
    program(bin_dir, "fake-cline", "echo 'cline version 3.0.65' >&2; exit 0")  # only on stderr
    program(bin_dir, "fake-silent", "exit 3")
    agents = [
        agent("claude-code", "fake-claude"),
        agent("codex", "fake-codex"),
        agent("cline", "fake-cline"),
        agent("aider", "fake-silent"),
        agent("opencode", "fake-opencode", package="opencode-ai"),
        agent("continue", None),
    ]
    found = installed_agents(agents, environ={"PATH": str(bin_dir)}, home=tmp_path / "home")
    assert list(found) == ["claude-code", "codex", "cline", "aider", "opencode", "continue"]
    assert found["claude-code"].path == bin_dir / "fake-claude" and found["claude-code"].version == "2.1.332"
    assert found["codex"].version == "0.171.0"
    assert found["cline"].version == "3.0.65"
    assert found["aider"].installed and found["aider"].version is None and found["aider"].install_command is None
    missing = found["opencode"]
    assert not missing.installed and missing.version is None
    assert missing.install_command == "npm install -g opencode-ai"
    editor_only = found["continue"]
    assert editor_only.binary is None and not editor_only.installed


def test_a_hanging_program_times_out_with_everything_it_started(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    pid_files = [tmp_path / f"child-{n}.pid" for n in range(3)]
    for n, pid_file in enumerate(pid_files):
        program(bin_dir, f"fake-hang-{n}", f"sleep 300 &\necho $! > {pid_file}\nwait")
    program(bin_dir, "fake-quick", "echo 1.2.3")
    agents = [agent(agent_id, f"fake-hang-{n}") for n, agent_id in enumerate(("claude-code", "codex", "opencode"))]
    agents.append(agent("aider", "fake-quick"))
    started = time.monotonic()
    found = installed_agents(agents, environ={"PATH": str(bin_dir)}, home=tmp_path / "home", timeout=1.5)
    elapsed = time.monotonic() - started
    # Asked at once: three hanging programs cost about one timeout, not three.
    assert elapsed < 4.0, elapsed
    assert all(found[a.id].installed and found[a.id].version is None for a in agents[:3])
    assert found["aider"].version == "1.2.3"
    for pid_file in pid_files:
        pid = int(pid_file.read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_usual_install_folders_are_searched_when_path_lacks_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    local_bin = home / ".local" / "bin"
    program(local_bin, "fake-agent", "echo 0.24.4")
    nvm = home / ".nvm" / "versions" / "node"
    program(nvm / "v18.20.0" / "bin", "fake-qwen", "echo 0.1.0")
    program(nvm / "v22.3.0" / "bin", "fake-qwen", "echo 0.24.4")
    environ = {"PATH": "/usr/bin:/bin"}
    found = installed_agents(
        [agent("claude-code", "fake-agent"), agent("codex", "fake-qwen")], environ=environ, home=home
    )
    assert found["claude-code"].path == local_bin / "fake-agent" and found["claude-code"].version == "0.24.4"
    assert found["codex"].path == nvm / "v22.3.0" / "bin" / "fake-qwen"  # the newest Node's prefix first
    assert search_path(home, environ).split(os.pathsep)[:3] == ["/usr/bin", "/bin", str(local_bin)]


def test_interpreter_of_a_script_comes_from_the_search_path(tmp_path: Path) -> None:
    # An npm program is a `#!/usr/bin/env node` script, and node is in the folder PATH lacks.
    home = tmp_path / "home"
    npm_bin = home / ".npm-global" / "bin"
    program(npm_bin, "fake-node", 'echo "fake-agent 9.8.7"')
    script = npm_bin / "fake-agent"
    script.write_text("#!/usr/bin/env fake-node\n")
    script.chmod(0o755)
    found = installed_agents([agent("codex", "fake-agent")], environ={"PATH": "/usr/bin:/bin"}, home=home)
    assert found["codex"].version == "9.8.7"


def test_usual_folders_per_platform(tmp_path: Path) -> None:
    windows = usual_bin_dirs(tmp_path, {"APPDATA": str(tmp_path / "Roaming")}, "win32")
    assert windows[0] == tmp_path / "Roaming" / "npm"
    mac = usual_bin_dirs(tmp_path, {"NPM_CONFIG_PREFIX": str(tmp_path / "prefix")}, "darwin")
    assert mac[:2] == [tmp_path / "prefix" / "bin", tmp_path / ".local" / "bin"]
    assert Path("/opt/homebrew/bin") in mac and Path("/usr/local/bin") in mac
