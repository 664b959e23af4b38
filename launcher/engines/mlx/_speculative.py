"""Speculative decoding inside mlx-lm's batched generation (policy: launcher/engines/speculation.py):
drafts from n-grams of each sequence's own text, and, where none repeats, from a draft model (`_draft`).

mlx-lm's `GenerationBatch` decodes one token per sequence per step: its step runs the model on a
(sequences x 1) batch over one `BatchKVCache`, whose rows are left-padded to a common length. While
any sequence of the batch may draft, `SpeculativeBatch` runs the step itself instead: the model sees a
(sequences x (1 + width)) batch, each row its pending token (sampled last step) followed by its draft,
right-padded to the widest draft. So every sequence's draft is verified in the same batched forward as
the others' decode tokens, as in the llama.cpp engine; a row without a draft pays for the padding
(`draft_width` weighs that: one more draft position costs a row for every sequence).

Each row is then sampled in order through the request's own logits processors and sampler, one call
per emitted token as without speculation, and its draft is kept up to the first token the sampling
disagrees with. Greedy requests give exactly the tokens they give without it, and seeded sampling the
same draws (the sampler's key advances once per emitted token either way); grammars consume only
tokens that were kept. As in mlx-lm, the tokens a step emits are those whose KV the cache now holds:
the pending token and the accepted draft tokens; the token sampled after them is the next pending one.

Rollback: the cache first drops the positions no row kept (`trim`, which every `BatchKVCache` layer
supports); a row that kept fewer tokens than the longest is then shifted right by the difference, so
its rejected tail moves out past the end and the row gains left padding, which the attention mask
already hides. That is mlx-lm's own finalisation of right-padded prompts (`prepare(right_padding=...)`
then `finalize()`); it copies those layers' keys and values, a cost a step pays only when its rows kept
different numbers of tokens (never with one stream). The left padding a row gains stays until the
batch's composition changes (`filter` drops the padding all rows share).

Only models whose every layer keeps a plain `KVCache` speculate (`supported`): a rotating
(sliding-window) cache cannot take back positions once it has wrapped, and recurrent state
(`ArraysCache`, Mamba-style layers) has no positions to take back; those models decode one token per
step, whatever the setting.

A step that may draft waits for the tokens sampled by the last one (the drafts continue them), which
loses mlx-lm's overlap of one step's computation with the building of the next; so a step in which
no sequence can draft (all "off", or none whose last tokens occurred before: most steps of prose)
takes mlx-lm's own pipelined step instead, as does a step whose sequences offered nothing worth
verifying (but one in TIME_PLAIN_EVERY, timed as a step without drafts for the cost model).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np
import numpy.typing as npt
from mlx_lm.generate import GenerationBatch
from mlx_lm.models.cache import BatchKVCache, KVCache
from mlx_lm.sample_utils import greedy_sampler

from launcher.core.config import SpeculativeMode
from launcher.engines.mlx._draft import MlxDraftModel
from launcher.engines.speculation import (
    MAX_DRAFT,
    NGRAM_MIN,
    PROBE_EVERY,
    DraftStats,
    Offer,
    StepCost,
    ngram_draft,
)

_EMPTY = np.zeros(0, dtype=np.int32)
TIME_PLAIN_EVERY = 8  # of the steps that verify nothing, one in this many runs here, timed for `StepCost`


def supported(layers: list[Any]) -> bool:
    """Whether a model whose fresh prompt cache is `layers` can take back rejected draft tokens."""
    return bool(layers) and all(type(layer) is KVCache for layer in layers)


@dataclass(eq=False)
class Drafting:
    """One speculating sequence: its mode, acceptance record and counts, and its tokens as an array."""

    mode: SpeculativeMode  # "auto", "ngram" or "draft" (an "off" sequence has no Drafting)
    stats: DraftStats = field(default_factory=DraftStats)  # n-gram drafts'
    model_stats: DraftStats = field(default_factory=DraftStats)  # the draft model's
    from_model: bool = False  # where this step's draft came from
    drafted: int = 0  # draft tokens verified for this request ...
    accepted: int = 0  # ... and accepted
    history: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(1024, dtype=np.int32))
    length: int = 0  # history[:length] = the tokens whose KV the sequence holds
    pairs: set[int] = field(default_factory=set)  # (a << 32 | b) for each pair a, b in the history ...
    paired: int = 0  # ... starting before this position (see `catch_up`)

    def catch_up(self, tokens: list[int]) -> None:
        """Bring `history` up to `tokens` (only the new ones are copied), with room for one more."""
        count = len(tokens)
        if count + 1 > len(self.history):
            grown = np.zeros(max(count + 1, 2 * len(self.history)), dtype=np.int32)
            grown[: self.length] = self.history[: self.length]
            self.history = grown
        if count > self.length:
            self.history[self.length : count] = tokens[self.length : count]
        self.length = count
        # the pairs of tokens followed by a known token: those starting before count - 2
        if count - 2 > self.paired:
            first = self.history[self.paired : count - 2].astype(np.int64)
            second = self.history[self.paired + 1 : count - 1].astype(np.int64)
            self.pairs.update(((first << 32) | second).tolist())
            self.paired = count - 2

    def may_match(self) -> bool:
        """Whether a draft could follow whatever token comes next: the last two tokens occurred before
        with a token after them (a match of NGRAM_MIN >= 3 tokens needs that; checked before the next
        token is known, so that a step with nothing to draft need not wait for it)."""
        n = self.length
        return n >= NGRAM_MIN and (int(self.history[n - 2]) << 32 | int(self.history[n - 1])) in self.pairs

    def draft(self, limit: int) -> npt.NDArray[np.int32]:
        """The n-gram draft after the history and the token sampled last, which the caller wrote at
        `history[length]` (`catch_up` leaves room for it)."""
        return ngram_draft(self.history, self.length + 1, limit)


def _expected(stats: DraftStats, tokens: int) -> float:
    """Draft tokens expected to be accepted out of the first `tokens` (`DraftStats.chances`)."""
    return float(stats.chances(tokens).sum()) if tokens > 0 else 0.0


def _best_width(offers: list[Offer], streams: int, estimate: tuple[float, float] | None, extra_s: float = 0.0) -> int:
    """The width that verifies every forced offer ("ngram", "draft") whole and, beyond that, gives the
    most expected tokens per second (each position costs a row for every one of `streams`: the batch is
    rectangular; and `extra_s` per offer, the seconds a draft model takes to make a token)."""
    width = max((len(o.draft) for o in offers if o.mode != "auto"), default=0)
    auto = [o for o in offers if o.mode == "auto"]
    if not auto or estimate is None:
        return width
    fixed, per_row = estimate

    def rate(w: int) -> float:
        tokens = streams + sum(_expected(o.stats, min(len(o.draft), w)) for o in offers)
        return tokens / max(fixed + per_row * streams * (1 + w) + extra_s * len(offers) * w, 1e-9)

    best = rate(width)
    for w in range(width + 1, max(len(o.draft) for o in auto) + 1):
        if (r := rate(w)) > best:
            best, width = r, w
    return width


def draft_width(offers: list[Offer], streams: int, cost: StepCost, extra_s: float = 0.0) -> int:
    """Draft positions this step verifies for every row (an offer of that many tokens or fewer is verified
    whole), from the offers' acceptance and the step cost (`_best_width`). A sequence that stopped
    drafting still probes one token every PROBE_EVERY offers."""
    width = _best_width(offers, streams, cost.estimate(), extra_s)
    for offer in offers:
        if offer.mode != "auto":
            continue
        if width > 0:
            offer.stats.skipped = 0
            continue
        offer.stats.skipped += 1
        if offer.stats.skipped >= PROBE_EVERY:
            offer.stats.skipped = 0
            width = 1
    return width


Candidate = tuple[DraftStats, SpeculativeMode, int]
"""A sequence that may draft this step: its record (n-gram or draft model), mode, draft tokens at most."""


def worth_waiting(candidates: list[Candidate], streams: int, cost: StepCost, extra_s: float = 0.0) -> bool:
    """Before the tokens sampled last step are known: whether any of these sequences could be verifying a
    draft this step, were its last tokens to match (or its draft model confident). Counts a skipped offer
    for those that could not (see `draft_width`), until one is due to probe."""
    estimate = cost.estimate()
    if not candidates:
        return False
    if estimate is None or any(mode != "auto" for _, mode, _ in candidates):
        return True
    best = [Offer(stats, np.zeros(limit, dtype=np.int32), mode) for stats, mode, limit in candidates]
    if _best_width(best, streams, estimate, extra_s) > 0:
        return True
    due = False
    for stats, _, _ in candidates:
        stats.skipped += 1
        due = due or stats.skipped >= PROBE_EVERY
    return due


class SpeculativeBatch(GenerationBatch):  # type: ignore[misc]
    """mlx-lm's generation batch with a step that verifies drafts (see the module's docstring).

    `rows` holds the speculating sequences by mlx-lm uid (the scheduler adds and removes them);
    `draft_tokens`/`accepted_draft_tokens` count since the scheduler last took them (`take_counts`)."""

    rows: dict[int, Drafting]
    cost: StepCost
    draft_model: MlxDraftModel | None
    _current_tokens: Any
    draft_tokens: int
    accepted_draft_tokens: int
    _plain_steps: int  # steps that could have drafted and did not

    @classmethod
    def install(cls, generator: Any, draft_model: MlxDraftModel | None = None) -> SpeculativeBatch | None:
        """Put an empty SpeculativeBatch in place of the (still empty) generation batch of mlx-lm's
        BatchGenerator; None when this mlx-lm's generator is not built the way this module expects."""
        current = getattr(generator, "_generation_batch", None)
        needed = ("_next_tokens", "_next_logprobs", "_token_context", "_num_tokens", "_matchers", "prompt_cache")
        if type(current) is not GenerationBatch or len(current) or not all(hasattr(current, a) for a in needed):
            return None
        batch: SpeculativeBatch = cls.empty(generator.model, generator.sampler)
        batch.rows, batch.cost, batch.draft_model = {}, StepCost(), draft_model
        batch.draft_tokens = batch.accepted_draft_tokens = batch._plain_steps = 0
        generator._generation_batch = batch
        return batch

    def take_counts(self) -> tuple[int, int]:
        """Draft tokens verified and accepted since the last call."""
        counts = (self.draft_tokens, self.accepted_draft_tokens)
        self.draft_tokens = self.accepted_draft_tokens = 0
        return counts

    def drop(self, uid: int) -> Drafting | None:
        """The sequence ended: forget it (and its draft model cache); its record, if it had one."""
        if self.draft_model is not None:
            self.draft_model.forget(uid)
        return self.rows.pop(uid, None)

    def next(self) -> list[Any]:
        if not self._may_draft():
            return super().next()  # mlx-lm's own step: one token per sequence, pipelined
        return self._verifying_step()

    def _may_draft(self) -> bool:
        """Whether some sequence may draft this step. When none can (no speculating sequence, none whose
        last tokens occurred before as in most steps of prose, or none whose drafts pay), mlx-lm's step
        runs without waiting for the tokens sampled last step."""
        if not self.rows or not all(isinstance(layer, BatchKVCache) for layer in self.prompt_cache):
            return False  # the second is not expected (see `supported`): nothing could be taken back
        copying: list[Candidate] = []
        guessing: list[Candidate] = []  # by the draft model
        for i, uid in enumerate(self.uids):
            row = self.rows.get(uid)
            limit = min(MAX_DRAFT, self.max_tokens[i] - self._num_tokens[i] - 1)
            if row is not None and limit > 0:
                row.catch_up(self.tokens[i])
                if row.mode != "draft" and row.may_match():
                    copying.append((row.stats, row.mode, limit))
                elif self.draft_model is not None and row.mode != "ngram":
                    guessing.append((row.model_stats, row.mode, limit))
        streams = len(self.uids)
        return worth_waiting(copying, streams, self.cost) or worth_waiting(
            guessing, streams, self.cost, self._draft_seconds()
        )

    def _draft_seconds(self) -> float:
        """What a draft model's token costs (unknown before its first draft: then nothing)."""
        return (self.draft_model.round_seconds or 0.0) if self.draft_model is not None else 0.0

    # ----- the step ----------------------------------------------------------------------------

    def _verifying_step(self) -> list[Any]:
        mx.eval(self._next_tokens)  # the tokens sampled last step: the drafts continue them
        sampled: Any = self._next_tokens.tolist()
        pending = [int(t) for t in sampled]
        drafts = self._drafts(pending)
        started = time.perf_counter()  # the step's cost, without the draft model's (`_draft_seconds`)
        width = max(len(d) for d in drafts)
        if width == 0:
            self._plain_steps += 1
            if self._plain_steps % TIME_PLAIN_EVERY != 1:
                return super().next()  # nothing to verify: mlx-lm's step, which overlaps the next one
        batch = len(self.uids)
        inputs = np.zeros((batch, 1 + width), dtype=np.int32)
        inputs[:, 0] = pending
        for i, draft in enumerate(drafts):
            inputs[i, 1 : 1 + len(draft)] = draft
        logits = self.model(mx.array(inputs), cache=self.prompt_cache)
        normalized = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        samplers: Any = self.samplers
        processors: Any = self.logits_processors
        greedy = {i for i in range(batch) if samplers[i] is greedy_sampler and not processors[i]}
        choices = None
        if greedy:  # plain greedy rows: every position's argmax at once (greedy_sampler's own op)
            choices = np.array(mx.argmax(normalized, axis=-1))

        emitted: list[list[int]] = []
        logprobs: list[list[Any]] = []
        finish: list[str | None] = []
        next_tokens: list[int] = []
        next_logprobs: list[Any] = []
        for i in range(batch):
            draft = drafts[i]
            tokens, lps = [pending[i]], [self._next_logprobs[i]]
            reason = self._count(i, pending[i])
            upcoming, upcoming_lp = pending[i], self._next_logprobs[i]  # unused once the row has ended
            position = 0
            while reason is None:
                if choices is not None and i in greedy:
                    token, lp = int(choices[i, position]), normalized[i, position]
                else:
                    token, lp = self._sample(i, position, tokens[-1], logits)
                if position < len(draft) and token == int(draft[position]):
                    tokens.append(token)
                    lps.append(lp)
                    position += 1
                    reason = self._count(i, token)
                else:
                    upcoming, upcoming_lp = token, lp
                    break
            if len(draft):
                accepted = len(tokens) - 1
                row = self.rows[self.uids[i]]
                (row.model_stats if row.from_model else row.stats).record(len(draft), accepted)
                row.drafted += len(draft)
                row.accepted += accepted
                self.draft_tokens += len(draft)
                self.accepted_draft_tokens += accepted
            emitted.append(tokens)
            logprobs.append(lps)
            finish.append(reason)
            next_tokens.append(upcoming)
            next_logprobs.append(upcoming_lp)

        self._take_back([len(tokens) for tokens in emitted], 1 + width)
        mx.eval([layer.state for layer in self.prompt_cache])
        self.cost.record(batch * (1 + width), time.perf_counter() - started)

        self._current_tokens = mx.array([tokens[-1] for tokens in emitted], dtype=mx.uint32)
        self._current_logprobs = [lps[-1] for lps in logprobs]
        self._next_tokens = mx.array(next_tokens, dtype=mx.uint32)
        self._next_logprobs = next_logprobs
        responses: list[Any] = []
        keep: list[int] = []
        for i in range(batch):
            self.tokens[i].extend(emitted[i])
            reason = finish[i]
            if reason is None:
                keep.append(i)
            last = len(emitted[i]) - 1
            for n, (token, lp) in enumerate(zip(emitted[i], logprobs[i], strict=True)):
                ends = reason is not None and n == last
                responses.append(
                    self.Response(
                        uid=self.uids[i],
                        token=token,
                        logprobs=lp,
                        finish_reason=reason if ends else None,
                        prompt_cache=self.extract_cache(i) if ends else None,
                        all_tokens=self.tokens[i] if ends else None,
                    )
                )
        if len(keep) < batch:
            self.filter(keep)
        return responses

    def _drafts(self, pending: list[int]) -> list[npt.NDArray[np.int32]]:
        """Each row's draft for this step (empty for most): an n-gram draft where its text repeats, cut to
        the step's width, else the draft model's where one is loaded."""
        offers: list[tuple[int, Offer]] = []
        from_model: list[tuple[int, Offer]] = []
        for i, uid in enumerate(self.uids):
            row = self.rows.get(uid)
            if row is None:
                continue
            row.from_model = False
            # the pending token is emitted this step, and a draft never runs past max_tokens
            limit = min(MAX_DRAFT, self.max_tokens[i] - self._num_tokens[i] - 1)
            if limit <= 0:
                continue
            row.catch_up(self.tokens[i])
            row.history[row.length] = pending[i]  # the history a draft continues ends with it
            draft = row.draft(limit) if row.mode != "draft" else _EMPTY
            if len(draft):
                offers.append((i, Offer(row.stats, draft, row.mode)))
            elif self.draft_model is not None and row.mode != "ngram":
                # sized before the draft model runs: its tokens cost time whether or not they are used
                from_model.append((i, Offer(row.model_stats, np.zeros(limit, dtype=np.int32), row.mode)))
        drafts = [_EMPTY] * len(self.uids)
        streams = len(self.uids)
        if offers:
            width = draft_width([offer for _, offer in offers], streams, self.cost)
            for i, offer in offers:
                drafts[i] = offer.draft[:width]
        if from_model and self.draft_model is not None:
            width = draft_width([offer for _, offer in from_model], streams, self.cost, self._draft_seconds())
            if width > 0:
                rows = [(self.uids[i], self.rows[self.uids[i]]) for i, _ in from_model]
                wants = [(uid, row.history, row.length + 1, width) for uid, row in rows]
                made = self.draft_model.draft(wants)
                for i, _ in from_model:
                    uid = self.uids[i]
                    if uid in made:
                        drafts[i] = made[uid]
                        self.rows[uid].from_model = True
        return drafts

    def _count(self, i: int, token: int) -> str | None:
        """Count one emitted token of row `i`; why the sequence ends with it, if it does (as mlx-lm's step)."""
        reason = None
        self._num_tokens[i] += 1
        if self._num_tokens[i] >= self.max_tokens[i]:
            reason = "length"
        if self._matchers[i].advance(token):
            reason = "stop"
        return reason

    def _sample(self, i: int, position: int, token_in: int, logits: Any) -> tuple[int, Any]:
        """Sample row `i` at `position` (whose input was `token_in`) through its processors and sampler."""
        row_logits = logits[i : i + 1, position]
        every: Any = self.logits_processors
        if every[i]:
            buffer: Any = self._token_context[i]
            context = buffer.update_and_fetch(mx.array([token_in], dtype=mx.int32))
            for processor in every[i]:
                row_logits = processor(context, row_logits)
        lp = row_logits - mx.logsumexp(row_logits, axis=-1, keepdims=True)
        sampler: Any = self.samplers[i] if self.samplers else self.fallback_sampler
        return int(sampler(lp).item()), lp[0]

    def _take_back(self, kept: list[int], written: int) -> None:
        """Keep `kept[i]` of the `written` positions the step added to row i (see the module's docstring)."""
        longest = max(kept)
        if written > longest:
            for layer in self.prompt_cache:
                layer.trim(written - longest)
        shifts = [longest - k for k in kept]
        if any(shifts):
            for layer in self.prompt_cache:
                layer.prepare(right_padding=shifts)
                layer.finalize()
