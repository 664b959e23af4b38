"""An agent's second turn reads its prompt from the cache: two consecutive turns of a real session
(captured from the real CLI during its tool round trip) replayed against the starter model.

Turn 2 is turn 1 plus the tool call and its result, so at least 90% of it must be reported as
cached, in each protocol's own usage field. The times to first token are noted, not compared: on a
busy 2-core machine a ratio of two timings flakes (speed is `scripts/replay-agent-turns`' job).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agents.conftest import RoundTrip, note, start_starter
from tests.agents.replay import Replayed, replay
from tests.conformance.servers import RunningServer


@pytest.fixture(scope="module")
def replay_server(starter_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A starter server of its own, so turn 1 meets a cold cache."""
    server = start_starter(starter_gguf, tmp_path_factory.mktemp("replay-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("agent_id", ["claude-code", "codex"])
def test_the_second_turn_of_a_real_session_is_served_from_the_cache(
    agent_id: str, round_trip: Callable[[str], RoundTrip], replay_server: RunningServer
) -> None:
    turns = round_trip(agent_id).turns()
    assert len(turns) >= 2
    first, second = (replay(replay_server.url, turn) for turn in turns[-2:])
    results: list[Replayed] = [first, second]
    for number, result in enumerate(results, 1):
        note(
            f"{agent_id} turn {number} replayed: prompt {result.prompt_tokens:,}, cached {result.cached_tokens:,} "
            f"({result.cached_share:.0%}), TTFT {result.ttft_s or 0:.2f} s"
        )
    assert all(r.status == 200 and r.ttft_s is not None for r in results), results
    assert second.prompt_tokens > first.prompt_tokens > 2000
    assert second.cached_share >= 0.9, results
