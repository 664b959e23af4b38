"""How much prompt a scheduler step reads: the policy half of continuous batching, kept apart from
the llama.cpp mechanics in `_scheduler` so it can be read (and tested) on its own.

A step's time is shared between decode tokens of running streams and chunks of new prompts. Reading
a whole 512-token chunk takes over a second on a 2-core CPU and freezes every running stream for
that long; a GPU reads it in milliseconds. So the room for prompt tokens is sized from measured
step times (`StepClock`) against a stall target, short prompts are never cut (`prompt_takes`), and
an idle scheduler waits a moment for the rest of a burst (`burst_wait`).
"""

from __future__ import annotations

MIN_PREFILL_CHUNK = 32  # prompt tokens per step at least: below this a step's fixed costs dominate


class StepClock:
    """Learns what a step costs, to size prompt chunks: seconds per decode token (from decode-only
    steps, fixed per-step costs included) and seconds per prompt token (the rest of mixed steps)."""

    def __init__(self) -> None:
        self.per_decode_token: float | None = None
        self.per_prompt_token: float | None = None

    def record(self, decode_tokens: int, prompt_tokens: int, seconds: float) -> None:
        """Fold in one step's wall time (moving averages, so a busy moment fades out)."""
        if prompt_tokens == 0:
            if decode_tokens:
                self.per_decode_token = _blend(self.per_decode_token, seconds / decode_tokens)
            return
        if prompt_tokens < MIN_PREFILL_CHUNK:
            return  # mostly fixed costs: says little about a prompt token
        decode_part = decode_tokens * (self.per_decode_token or 0.0)
        self.per_prompt_token = _blend(self.per_prompt_token, max(seconds - decode_part, seconds / 2) / prompt_tokens)

    def prompt_room(self, stall_s: float, decode_tokens: int, free: int) -> int:
        """Prompt tokens that fit next to `decode_tokens` in a step meant to last about `stall_s`
        (all of `free` until a prompt step has been timed)."""
        if self.per_prompt_token is None:
            return free
        budget = stall_s - decode_tokens * (self.per_decode_token or 0.0)
        return min(free, max(MIN_PREFILL_CHUNK, int(budget / self.per_prompt_token)))


def _blend(old: float | None, sample: float) -> float:
    return sample if old is None else 0.8 * old + 0.2 * sample


BURST_WAIT_MAX_S = 0.025  # never hold a request longer than this for others to join it
BURST_WAIT_SHARE = 0.1  # ... nor longer than this share of the time its prompt takes to read


def burst_wait(per_prompt_token: float | None, prompt_tokens: int) -> float:
    """Seconds an idle scheduler may wait for more requests before reading `prompt_tokens`: a
    share of the expected read time, so a GPU (a few ms per prompt) practically never waits.
    0 until a prompt step has been timed."""
    if per_prompt_token is None:
        return 0.0
    return min(BURST_WAIT_MAX_S, BURST_WAIT_SHARE * per_prompt_token * prompt_tokens)


def prompt_takes(remaining: list[int], room: int, free: int) -> list[int]:
    """How many tokens of each prompt being read (`remaining`, in admission order) go in this step.

    Prompts that fit in `room` on their own are read whole, shortest first, limited only by the
    batch's `free` rows: a burst of short requests next to running streams starts in one step
    instead of being spread over several. The longer prompts split what is left of `room` evenly
    (water-filling), so one long prompt cannot starve another.
    """
    takes = [0] * len(remaining)
    by_length = sorted(range(len(remaining)), key=lambda i: remaining[i])  # stable: FIFO among equals
    fitting = [i for i in by_length if remaining[i] <= room]
    longer = [i for i in by_length if remaining[i] > room]
    for i in fitting:
        takes[i] = min(remaining[i], free)
        free -= takes[i]
    left = min(free, max(0, room - sum(takes)))
    for rank, i in enumerate(longer):
        takes[i] = min(remaining[i], left // (len(longer) - rank))
        left -= takes[i]
    return takes
