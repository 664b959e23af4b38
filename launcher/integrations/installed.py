"""Which coding agents are installed here, and their versions: the app's Agents page shows this.

An agent names its command-line program (`Agent.binary`, None for one that lives in an editor);
it is looked up on PATH and, where PATH lacks them, in the folders the usual installers put
programs in: npm's global bin (https://docs.npmjs.com/cli/configuring-npm/folders: `{prefix}/bin`
on macOS and Linux, `{prefix}` on Windows; `NPM_CONFIG_PREFIX`, nvm's and Volta's prefixes, the
`~/.npm-global` prefix npm's docs suggest for installs without sudo, Homebrew's bin) and
`~/.local/bin` (pipx, https://pipx.pypa.io/stable/installation/, and Claude Code's native
installer). Those extra folders matter for the app: macOS starts a double-clicked app with a
minimal PATH (/usr/bin:/bin:/usr/sbin:/sbin) that has none of them.

The version is the first version-looking token `<binary> --version` prints ("2.1.332 (Claude
Code)", "codex-cli 0.171.0", "aider 0.86.2"). Some agents take seconds to answer (a Node start
that loads their whole bundle), so every agent is asked at once in a thread pool with a short
timeout: all of them together take about one timeout at worst.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from launcher.core.child_process import outside_environment, own_process_group
from launcher.integrations.agents import AGENTS
from launcher.integrations.agents.base import Agent

VERSION_TIMEOUT_S = 6.0  # Cline and Continue's `cn` take ~2 s to print their version on a slow laptop
_VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*(?:[-+][0-9A-Za-z][0-9A-Za-z.+-]*)?)")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class InstalledAgent:
    """What the Agents page shows for one agent: where its program is and which version it is.

    `path` is None when the program was not found (or the agent has none: `binary` is None);
    `version` is None when the program did not say one in time. `install_command` is how to get
    it, given only when it is missing.
    """

    agent_id: str
    binary: str | None
    path: Path | None
    version: str | None
    install_command: str | None

    @property
    def installed(self) -> bool:
        """True when the agent's program was found."""
        return self.path is not None


def usual_bin_dirs(
    home: Path | None = None, environ: Mapping[str, str] | None = None, platform: str = sys.platform
) -> list[Path]:
    """Folders where npm, pipx and the agents' own installers put programs, existing or not, in search order."""
    env = os.environ if environ is None else environ
    home = home if home is not None else Path.home()
    dirs: list[Path] = []
    prefix = env.get("NPM_CONFIG_PREFIX") or env.get("npm_config_prefix")
    if platform == "win32":
        if prefix:
            dirs.append(Path(prefix))
        appdata = env.get("APPDATA")
        dirs.append(Path(appdata) / "npm" if appdata else home / "AppData" / "Roaming" / "npm")
        dirs += [home / ".volta" / "bin", home / ".local" / "bin"]
        return dirs
    if prefix:
        dirs.append(Path(prefix) / "bin")
    dirs += [home / ".local" / "bin", home / ".npm-global" / "bin", home / ".volta" / "bin"]
    # nvm keeps one prefix per Node version; the newest one is the likeliest to hold the agent.
    nvm_dir = Path(env.get("NVM_DIR") or home / ".nvm") / "versions" / "node"
    if nvm_dir.is_dir():
        dirs += [version / "bin" for version in sorted(nvm_dir.iterdir(), key=_version_key, reverse=True)]
    dirs += [Path("/opt/homebrew/bin"), Path("/usr/local/bin")]
    return dirs


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name))


def search_path(
    home: Path | None = None, environ: Mapping[str, str] | None = None, platform: str = sys.platform
) -> str:
    """PATH followed by the usual install folders it lacks, as one PATH string."""
    env = os.environ if environ is None else environ
    entries = [entry for entry in env.get("PATH", "").split(os.pathsep) if entry]
    seen = {os.path.normcase(os.path.normpath(entry)) for entry in entries}
    for folder in usual_bin_dirs(home, env, platform):
        key = os.path.normcase(os.path.normpath(str(folder)))
        if key not in seen and folder.is_dir():
            seen.add(key)
            entries.append(str(folder))
    return os.pathsep.join(entries)


def parse_version(text: str) -> str | None:
    """The first version-looking token of a `--version` answer ("codex-cli 0.171.0" -> "0.171.0")."""
    match = _VERSION.search(_ANSI.sub("", text))
    return match.group(1).rstrip(".+-") if match else None  # "version 1.2.3-rc." ends a sentence


def program_version(path: Path, *, path_env: str, timeout: float = VERSION_TIMEOUT_S) -> str | None:
    """What `path --version` says its version is; None when it fails, hangs or names none.

    The child gets the search PATH too: an npm program is a `#!/usr/bin/env node` script, and
    `node` sits in the same folders the app's own minimal PATH may lack.
    """
    env = {**outside_environment(), "PATH": path_env, "NO_COLOR": "1", "CI": "1"}
    # Its own process group, so that a timeout also ends what it started (a shell script's children).
    try:
        process = subprocess.Popen(
            [str(path), "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            **own_process_group(),
        )
    except OSError:
        return None
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return None
    # Codex prints warnings before its version; stdout is where the answer is, stderr a fallback.
    return parse_version(out.decode("utf-8", "replace")) or parse_version(err.decode("utf-8", "replace"))


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    if sys.platform == "win32":
        process.kill()
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    # The pipes may still be held by nothing now; read what is left so the process is reaped.
    try:
        process.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def find_program(binary: str, path_env: str) -> Path | None:
    """The full path of `binary` on this PATH string, or None."""
    found = shutil.which(binary, path=path_env)
    return Path(found) if found else None


def installed_agents(
    agents: Iterable[Agent] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    timeout: float = VERSION_TIMEOUT_S,
) -> dict[str, InstalledAgent]:
    """Every agent (all known ones by default) by id: its program's path, version and install command."""
    chosen = list(AGENTS.values() if agents is None else agents)
    path_env = search_path(home, environ)
    paths = {agent.id: find_program(agent.binary, path_env) if agent.binary else None for agent in chosen}
    found = {agent_id: path for agent_id, path in paths.items() if path is not None}
    versions: dict[str, str | None] = {}
    if found:
        with ThreadPoolExecutor(max_workers=len(found)) as pool:
            futures = {
                agent_id: pool.submit(program_version, path, path_env=path_env, timeout=timeout)
                for agent_id, path in found.items()
            }
            versions = {agent_id: future.result() for agent_id, future in futures.items()}
    return {
        agent.id: InstalledAgent(
            agent_id=agent.id,
            binary=agent.binary,
            path=paths[agent.id],
            version=versions.get(agent.id),
            install_command=agent.install.command if agent.install and paths[agent.id] is None else None,
        )
        for agent in chosen
    }
