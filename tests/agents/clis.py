"""The real agent CLIs: which versions, where they are installed, and how to run one like a user.

npm packages install with the system's Node.js and npm (`npm install --prefix DIR`), Aider
into a virtual environment of its own, each in its own folder of the agent cache, outside the
project venv: `$LAUNCHER_AGENT_CACHE`, by default `~/.cache/launcher/test-agents`. An install
is reused while its folder holds a finished marker; a lock keeps two test runs from installing
into the same folder at once.

The versions are pinned in pins.toml; with `LAUNCHER_AGENT_VERSIONS=latest` (what
`scripts/test-agents --latest` sets) the newest published version of each is used instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

PINS = Path(__file__).with_name("pins.toml")
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class AgentCli:
    """One agent CLI at one version."""

    id: str  # the `launcher connect` id
    package: str
    registry: str  # "npm" or "pypi"
    version: str
    binary: str

    @property
    def folder(self) -> Path:
        """Where this version is installed."""
        return cache_dir() / f"{self.id}-{self.version}"

    @property
    def executable(self) -> Path:
        """The command a user would run."""
        if self.registry == "npm":
            return self.folder / "node_modules" / ".bin" / self.binary
        return self.folder / "venv" / "bin" / self.binary


def cache_dir() -> Path:
    """The agent cache (outside the project and its venv)."""
    configured = os.environ.get("LAUNCHER_AGENT_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "launcher" / "test-agents"


def missing_tools() -> str | None:
    """Why the npm agents cannot be installed here, or None."""
    absent = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if absent:
        return (
            f"{' and '.join(absent)} not found: install Node.js 18+ and npm from the system's package manager "
            "(Debian/Ubuntu: sudo apt-get install nodejs npm; macOS: brew install node)"
        )
    return None


def latest_version(package: str, registry: str) -> str:
    """The newest published version of a package."""
    if registry == "npm":
        out = subprocess.run(
            ["npm", "view", package, "version"], capture_output=True, text=True, check=True, timeout=120
        ).stdout
        return out.strip().splitlines()[-1]
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    match = re.search(rf"{re.escape(package)} \(([^)]+)\)", out)
    if match is None:
        raise RuntimeError(f"pip index versions {package} gave no version: {out[-500:]}")
    return match.group(1)


def wanted() -> list[AgentCli]:
    """The CLIs to test: the pins, or the newest versions when LAUNCHER_AGENT_VERSIONS=latest."""
    pins = tomllib.loads(PINS.read_text(encoding="utf-8"))
    latest = os.environ.get("LAUNCHER_AGENT_VERSIONS") == "latest"
    clis = []
    for agent_id, pin in pins.items():
        registry = "npm" if "npm" in pin else "pypi"
        package = pin[registry]
        version = latest_version(package, registry) if latest else pin["version"]
        clis.append(AgentCli(agent_id, package, registry, version, pin["binary"]))
    return clis


def install(cli: AgentCli) -> Path:
    """Install `cli` into its cache folder unless it is there already; returns the executable."""
    folder = cli.folder
    marker = folder / ".installed"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and cli.executable.exists():
            return cli.executable
        shutil.rmtree(folder, ignore_errors=True)  # a half-finished earlier attempt
        folder.mkdir(parents=True)
        started = time.monotonic()
        if cli.registry == "npm":
            command = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder)]
            _run_install([*command, f"{cli.package}@{cli.version}"])
        else:
            _run_install([sys.executable, "-m", "venv", str(folder / "venv")])
            _run_install(
                [str(folder / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"]
            )
            pip = [str(folder / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            _run_install([*pip, f"{cli.package}=={cli.version}"])
        if not cli.executable.exists():
            raise RuntimeError(f"installing {cli.package}@{cli.version} left no {cli.executable}")
        marker.write_text(json.dumps({"version": cli.version, "seconds": round(time.monotonic() - started, 1)}))
    return cli.executable


def _run_install(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")


@dataclass(frozen=True)
class AgentRun:
    """What a headless agent run did."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        """stdout and stderr, for failure messages."""
        return f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"


def clean_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A user's environment with a fresh HOME: no keys or settings leak in from the machine running tests."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "1",
    }
    return {**env, **(extra or {})}


def run_agent(
    executable: Path, argv: list[str], *, home: Path, workdir: Path, timeout: float, env: dict[str, str] | None = None
) -> AgentRun:
    """Run an agent headless in `workdir` with HOME=`home`, no stdin, and wait for it."""
    started = time.monotonic()
    try:
        result = subprocess.run(
            [str(executable), *argv],
            cwd=workdir,
            env=clean_env(home, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        return AgentRun(-1, _text(err.stdout), _text(err.stderr) + f"\n(timed out after {timeout} s)", timeout)
    return AgentRun(result.returncode, result.stdout, result.stderr, time.monotonic() - started)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def launch(
    cli: AgentCli, model: Path | None, agent_argv: list[str], *, home: Path, workdir: Path, timeout: float
) -> AgentRun:
    """`launcher launch AGENT [MODEL] -- ARGV` as a user with HOME=`home` and the agent on PATH runs it."""
    repo = Path(__file__).resolve().parents[2]
    path = f"{cli.executable.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = clean_env(home, {"PATH": path, "PYTHONPATH": str(repo)})
    argv = [sys.executable, "-m", "launcher", "launch", cli.id, *([str(model)] if model else []), "--", *agent_argv]
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as err:
        return AgentRun(-1, _text(err.stdout), _text(err.stderr) + f"\n(timed out after {timeout} s)", timeout)
    return AgentRun(result.returncode, result.stdout, result.stderr, time.monotonic() - started)


def connect(agent_id: str, base_url: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`launcher connect AGENT --base-url URL --write`, as the user whose HOME is `home` runs it."""
    repo = Path(__file__).resolve().parents[2]
    env = clean_env(home, {"PYTHONPATH": str(repo)})
    return subprocess.run(
        [sys.executable, "-m", "launcher", "connect", agent_id, "--base-url", base_url, "--write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
