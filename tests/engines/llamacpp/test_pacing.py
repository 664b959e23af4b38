"""The prompt-pacing policy: how much of each prompt a step reads, and how long an idle scheduler
waits for a burst (pure functions; the scheduling tests show the same policy on the real engine)."""

from __future__ import annotations

import pytest

from launcher.engines.llamacpp._pacing import StepClock, burst_wait, prompt_takes


def test_prompt_chunks_per_step() -> None:
    # A burst of short prompts next to running streams: read whole in one step, never cut by the
    # stall target's room (here 149 tokens), only by the batch.
    assert prompt_takes([94, 94, 93], room=149, free=509) == [94, 94, 93]
    assert prompt_takes([94] * 7, room=149, free=300) == [94, 94, 94, 18, 0, 0, 0]
    # A long prompt is cut to the room; a short one next to it is read whole first.
    assert prompt_takes([2000], room=149, free=509) == [149]
    assert prompt_takes([2000, 94], room=149, free=509) == [55, 94]
    # Long prompts share evenly; with nobody generating the room is the whole batch.
    assert prompt_takes([3000, 2000], room=512, free=512) == [256, 256]
    assert prompt_takes([3000, 100], room=512, free=512) == [412, 100]
    assert prompt_takes([3000, 2000, 90], room=100, free=509) == [5, 5, 90]


def test_an_idle_scheduler_waits_for_a_burst_only_on_slow_hardware() -> None:
    # 94 tokens at 2.2 ms each (2-core CPU): ~207 ms to read, so waiting up to ~21 ms for the rest
    # of a burst is cheap; capped at 25 ms for long prompts.
    assert burst_wait(0.0022, 94) == pytest.approx(0.02068)
    assert burst_wait(0.0022, 2000) == 0.025
    # A GPU reads the same prompt in ~5 ms: it practically never waits.
    assert burst_wait(0.00005, 94) < 0.001
    # Nothing is known before the first prompt has been timed: no wait.
    assert burst_wait(None, 94) == 0.0


def test_step_clock_sizes_prompt_chunks_from_measured_steps() -> None:
    clock = StepClock()
    assert clock.prompt_room(0.5, decode_tokens=3, free=509) == 509  # nothing timed yet: no limit
    clock.record(decode_tokens=3, prompt_tokens=0, seconds=0.039)  # 13 ms per decode token
    clock.record(decode_tokens=0, prompt_tokens=400, seconds=0.88)  # 2.2 ms per prompt token
    # 500 ms minus three decode tokens' 39 ms leaves room for ~209 prompt tokens.
    assert clock.prompt_room(0.5, decode_tokens=3, free=509) == 209
    # A GPU-fast step never limits the batch; a 0 ms target still reads the minimum chunk.
    assert StepClock().prompt_room(0.5, 3, 509) == 509
    assert clock.prompt_room(0.0, decode_tokens=3, free=509) == 32
