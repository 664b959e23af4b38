"""Speculative decoding from n-grams: drafts copied from a sequence's own text, and how many to verify.

Most of what a coding agent's model writes is already in its context: a file rewritten with a small
change, a diff's context lines, a command run again. When the last few tokens of a sequence occurred
before, the tokens that followed them then are a good guess for what follows now (`ngram_draft`). The
engine appends such a draft to the sequence's decode token in the same batched step, samples every
row, and keeps the draft up to the first token its own sampling disagrees with, plus that sampled
token: several tokens for one step where the guess was right, one token (and the cost of the extra
rows) where it was wrong.

Sampling each row and comparing is exact for any sampler: every emitted token is drawn from the
model's distribution given the tokens before it (for a draft that proposes one token per position,
this is speculative sampling's acceptance rule: accept with probability p(draft), else draw from the
rest). Greedy requests therefore produce the tokens they produce without speculation, and grammars
hold, as each row is sampled through the request's own sampler chain.

Extra rows are not free: on a CPU each one costs a good part of a step (the output layer alone is
vocab x hidden multiply-adds per row). `Speculator.plan` sizes drafts from what they are expected to
save against what they cost: each sequence's acceptance rate (`DraftStats`) and the step time as a
function of rows (`StepCost`, fitted from the scheduler's own steps). A draft token is verified only
while the tokens it is expected to add outweigh the time it adds for every stream in the step, so
prose, where the guesses fail, stops drafting, and a full batch of streams drafts less.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from launcher.core.config import SpeculativeMode
from launcher.core.errors import ModelFormatError

NGRAM_MIN = 3  # tokens that must repeat before their continuation is offered as a draft
NGRAM_MAX = 8  # a longer match is preferred up to this length (a better predictor than the most recent)
MAX_DRAFT = 64  # draft tokens per sequence per step at most (as llama-server's ngram-mod)
PROBE_EVERY = 16  # a sequence that stopped drafting still verifies one token every this many matches
# A draft model (`--draft`; each engine runs its own):
CATCH_UP_TOKENS = 256  # history tokens it reads per step at most, over all sequences (a long prompt never stalls)
MIN_CONFIDENCE = 0.6  # a draft ends before a token it gives less probability than this (rarely accepted)
_PRIOR_ACCEPTED = 1.0  # acceptance prior: 2 of 3 (an n-gram match in code usually continues), worth 1.5 trials
_PRIOR_REJECTED = 0.5
_STATS_DECAY = 0.8  # per verification: an agent moves between copying and writing anew
_COST_DECAY = 0.97  # per timed step
_SLOPE_PRIOR_SPREAD = 8.0  # rows^2: the assumed cost of a row weighs as much as two steps 2 rows off the mean
_EMPTY = np.zeros(0, dtype=np.int32)


def ngram_draft(tokens: npt.NDArray[np.int32], length: int, limit: int) -> npt.NDArray[np.int32]:
    """Up to `limit` tokens that followed an earlier occurrence of the last `NGRAM_MIN`+ tokens of
    `tokens[:length]`: of the occurrences matching the most trailing tokens (up to `NGRAM_MAX`), the
    most recent. Empty when nothing repeats."""
    if limit <= 0 or length <= NGRAM_MIN:
        return _EMPTY
    history = tokens[:length]
    # positions j < length - 1 whose token is the last one; each is a match ending at j
    ends = np.flatnonzero(history[NGRAM_MIN - 1 : length - 1] == history[length - 1]) + (NGRAM_MIN - 1)
    for back in range(1, min(NGRAM_MAX, length - 1)):
        still = ends[ends >= back]
        still = still[history[still - back] == history[length - 1 - back]]
        if len(still) == 0 and back >= NGRAM_MIN:
            break  # the longest matches found so far are kept
        ends = still
        if len(ends) == 0:
            return _EMPTY  # the minimum match is required
    start = int(ends[-1]) + 1
    return history[start : min(start + limit, length)].copy()


def kept_prefix(held: npt.NDArray[np.int32], history: npt.NDArray[np.int32], length: int) -> int:
    """How much of what a draft model's cache holds for a sequence (`held`) it keeps before drafting after
    `history[:length]`: their common prefix (rejected draft tokens, or a new request, make it shorter),
    less one when the whole history is held, as its last token is read again for the logits the first
    draft token comes from."""
    n = min(len(held), length)
    same = held[:n] == history[:n]
    common = n if bool(same.all()) else int(np.argmin(same))
    return min(common, length - 1)


def vocabulary_mismatch(draft_name: str, problem: str) -> ModelFormatError:
    """The error for a draft model whose tokens are not the served model's (`problem` says how)."""
    return ModelFormatError(
        f"{draft_name} cannot draft for this model: {problem}. A draft model must share the served "
        "model's vocabulary (a smaller model of the same family, e.g. Qwen2.5-Coder 0.5B for the 7B)."
    )


@dataclass
class DraftStats:
    """One sequence's record of its drafts, decayed so that recent ones count most: how often each
    draft position was tested and accepted, and overall accepted tokens and rejections.

    A copy is all or nothing: while the model copies, whole drafts are accepted, and the run ends
    where the text changes. A per-token rate (the geometric model) would say a 40-token draft of a
    sequence accepting 99% of its tokens holds only 67% of its 40th token; the per-position record says
    how far this sequence's drafts actually hold, and positions not tested yet get the overall rate."""

    accepted: float = 0.0
    rejected: float = 0.0
    skipped: int = 0  # matches offered and not drafted since the last draft (see PROBE_EVERY)
    reached: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(MAX_DRAFT))  # position tested
    kept: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(MAX_DRAFT))  # ... and accepted

    @property
    def acceptance(self) -> float:
        """The chance that a draft token is accepted after the one before it was, over all positions."""
        return (self.accepted + _PRIOR_ACCEPTED) / (self.accepted + self.rejected + _PRIOR_ACCEPTED + _PRIOR_REJECTED)

    def chances(self, count: int) -> npt.NDArray[np.float64]:
        """The chance that each of the first `count` tokens of a draft is accepted (non-increasing)."""
        overall = self.acceptance
        given_the_one_before = (self.kept[:count] + overall) / (self.reached[:count] + 1.0)
        return np.cumprod(given_the_one_before, dtype=np.float64)

    def record(self, drafted: int, accepted: int) -> None:
        self.accepted = _STATS_DECAY * self.accepted + accepted
        self.rejected = _STATS_DECAY * self.rejected + (1.0 if accepted < drafted else 0.0)
        self.reached *= _STATS_DECAY
        self.kept *= _STATS_DECAY
        self.reached[: min(drafted, accepted + 1)] += 1.0  # tokens after the first rejected one were not tested
        self.kept[:accepted] += 1.0


class StepCost:
    """Seconds a decode step takes as a function of its rows: fixed + per_row * rows, fitted by least
    squares over recent steps (decayed sums, so a busy moment fades out). The slope starts from an
    assumption, a row costs a quarter of the mean step, which counts as `_SLOPE_PRIOR_SPREAD` of spread
    in rows: while the rows have hardly varied the assumption holds (drafting is tried, and its steps
    teach the real slope), and one odd step cannot decide alone. (The first step of a new size on a
    fresh server was once timed at three times the others, the fit said a row cost a whole step, and
    drafting stopped until the next probe.)"""

    def __init__(self) -> None:
        self._n = self._x = self._y = self._xx = self._xy = 0.0

    def record(self, rows: int, seconds: float) -> None:
        d = _COST_DECAY
        self._n, self._x, self._y = d * self._n + 1, d * self._x + rows, d * self._y + seconds
        self._xx, self._xy = d * self._xx + rows * rows, d * self._xy + rows * seconds

    def estimate(self) -> tuple[float, float] | None:
        """(fixed seconds, seconds per row), or None before any step was timed."""
        if self._n < 1:
            return None
        mean_x, mean_y = self._x / self._n, self._y / self._n
        assumed = 0.25 * mean_y / max(mean_x, 1.0)
        spread = max(self._xx - self._n * mean_x * mean_x, 0.0)  # sum of (rows - mean)^2, decayed
        covariance = self._xy - self._n * mean_x * mean_y
        slope = (covariance + assumed * _SLOPE_PRIOR_SPREAD) / (spread + _SLOPE_PRIOR_SPREAD)
        per_row = min(max(slope, 0.0), mean_y / max(mean_x, 1.0))
        return max(mean_y - per_row * mean_x, 0.0), per_row


@dataclass
class Offer:
    """A sequence's candidate draft this step."""

    stats: DraftStats
    draft: npt.NDArray[np.int32]
    mode: SpeculativeMode  # "auto", or a forced "ngram"/"draft" (an "off" sequence makes no offer)


class Speculator:
    """Decides, each step, how many tokens of each offered draft the step verifies."""

    def __init__(self) -> None:
        self.cost = StepCost()

    def plan(self, offers: list[Offer], streams: int, room: int, extra_s: float = 0.0) -> list[int]:
        """Draft tokens to verify per offer, `room` rows at most in all. `streams` sequences decode in
        this step anyway. Offers made in a forced mode ("ngram", "draft") take their whole draft; "auto"
        ones take each next token while the chance it is accepted (`DraftStats.chances`)
        exceeds what it costs in tokens: (per_row + extra_s, the seconds of making it, for a draft
        model) * (expected tokens of the step) / (expected seconds of the step)."""
        sizes = [0] * len(offers)
        for i, offer in enumerate(offers):
            if offer.mode != "auto":
                sizes[i] = min(len(offer.draft), room)
                room -= sizes[i]
        estimate = self.cost.estimate()
        auto = [i for i, offer in enumerate(offers) if offer.mode == "auto" and len(offer.draft)]
        if not auto:
            return sizes
        if estimate is None:  # the first step: nothing timed yet
            return sizes
        fixed, per_row = estimate
        per_token = per_row + extra_s
        tokens = float(streams)
        seconds = fixed + per_row * (streams + sum(sizes))
        # every auto offer's i-th token, most likely first (for one offer they come in order i = 1, 2, ...)
        ranked = sorted(
            ((float(chance), i) for i in auto for chance in offers[i].stats.chances(len(offers[i].draft))),
            reverse=True,
        )
        for chance, i in ranked:
            if room <= 0 or chance * seconds <= per_token * tokens:
                break
            sizes[i] += 1
            room -= 1
            tokens += chance
            seconds += per_token
        for i in auto:  # a sequence that stopped drafting still probes now and then
            stats = offers[i].stats
            if sizes[i]:
                stats.skipped = 0
                continue
            stats.skipped += 1
            if stats.skipped >= PROBE_EVERY and room > 0:
                sizes[i], stats.skipped = 1, 0
                room -= 1
        return sizes
