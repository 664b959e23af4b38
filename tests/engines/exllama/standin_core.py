"""The stand-in's shared parts: a torch imitation, the tokenizer, the dynamic generator and its jobs.

See standin.py. THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from tests.engines.exllama.standin import Runtime

PAGE_SIZE = 256


# ----- torch ------------------------------------------------------------------------------------------


class FakeTensor:
    """Nested lists (or a numpy array, from torch.from_numpy) with the few tensor methods the engines call."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def tolist(self) -> Any:
        if isinstance(self.data, np.ndarray):
            return self.data.tolist()
        return json.loads(json.dumps(self.data))

    def item(self) -> Any:
        return np.asarray(self.data).item()

    def numpy(self) -> np.ndarray:
        return np.asarray(self.data)

    def unsqueeze(self, dim: int) -> FakeTensor:
        return FakeTensor(np.expand_dims(np.asarray(self.data), dim))

    def __setitem__(self, index: int, value: float) -> None:
        self.data[index] = value

    @property
    def shape(self) -> tuple[int, ...]:
        shape, value = [], self.data
        while isinstance(value, list):
            shape.append(len(value))
            value = value[0] if value else None
        return tuple(shape)


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError."""


def make_torch(*, devices: int = 1) -> SimpleNamespace:
    """torch.tensor/zeros/from_numpy/long/float/int32 and torch.cuda as the engines use them."""
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: devices,
        memory_allocated=lambda index: 1024 * 1024 * (index + 1),
        OutOfMemoryError=OutOfMemoryError,
    )
    return SimpleNamespace(
        __version__="2.6.0-standin",
        version=SimpleNamespace(cuda="12.4"),
        long="int64",
        float="float32",
        int32="int32",
        tensor=lambda data, dtype=None: FakeTensor(json.loads(json.dumps(data))),
        from_numpy=FakeTensor,
        zeros=lambda shape, dtype=None: FakeTensor([0.0] * shape[0]),
        cuda=cuda,
    )


# ----- shared generation core ------------------------------------------------------------------------


@dataclass
class Behaviour:
    """Knobs a test sets on its stand-in."""

    stop_after: int | None = None  # emit the first stop token after this many tokens
    step_delay_s: float = 0.0  # sleep per iterate() (so a test can cancel mid-stream)
    fail_load: Exception | None = None  # raised by model.load / load_autosplit
    fail_iterate: Exception | None = None  # raised by the next iterate()
    # Text each job writes first, token by token wherever its filters allow it, as a trained model writes
    # a call marker once it decides to call; then the usual choice.
    lead: str = ""


@dataclass
class Log:
    """What the engine asked the runtime to do."""

    cache_tokens: list[int] = field(default_factory=list)
    cache_kwargs: list[dict[str, Any]] = field(default_factory=list)
    load_kwargs: list[dict[str, Any]] = field(default_factory=list)
    generator_kwargs: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    cancelled: list[Any] = field(default_factory=list)
    unloaded: int = 0
    max_active: int = 0


class StandinTokenizer:
    """exllamav3.Tokenizer / exllamav2.ExLlamaV2Tokenizer over the folder's tokenizer.json."""

    def __init__(self, directory: str) -> None:
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        self.tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self._plain = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self._plain.encode_special_tokens = True  # special-token text stays text
        self.eos_token_id = self.tokenizer.token_to_id("<|im_end|>")
        self.bos_token_id = self.tokenizer.token_to_id("<|endoftext|>")
        special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
        self.special_ids = {self.tokenizer.token_to_id(t) for t in special}
        self.ordinary_ids = [i for i in range(self.tokenizer.get_vocab_size()) if i not in self.special_ids]

    def encode(
        self,
        text: str,
        add_bos: bool = False,
        add_eos: bool = False,
        encode_special_tokens: bool = False,
        return_offsets: bool = False,
        embeddings: Any = None,
    ) -> FakeTensor:
        ids = (self.tokenizer if encode_special_tokens else self._plain).encode(text, add_special_tokens=False).ids
        ids = ([self.bos_token_id] if add_bos else []) + ids + ([self.eos_token_id] if add_eos else [])
        return FakeTensor([ids])

    def decode(self, ids: FakeTensor, decode_special_tokens: bool = False) -> str:
        tokens = ids.tolist()
        return str(self.tokenizer.decode(tokens, skip_special_tokens=not decode_special_tokens))


_CLOSERS = '"}]:,0123456789'


class JobFilters(Protocol):
    """A job's filters as each runtime drives them (standin_v2.V2Filters, standin_v3.V3Filters)."""

    def start(self, job: Any, generator: StandinGenerator) -> None:
        """The job became active."""

    def allowed(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """(tokens allowed next, tokens that end the output), or None when no filter constrains this step."""

    def feed(self, token: int) -> bool:
        """A token was sampled; True ends the job (eos_reason "end_filter")."""


class StandinGenerator:
    """The dynamic generator: pending/active jobs, a paged cache budget, one token per job per iterate()."""

    def __init__(self, runtime: Runtime, tokenizer: StandinTokenizer, cache_tokens: int, max_batch_size: int) -> None:
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.cache_tokens = cache_tokens
        self.max_batch_size = max_batch_size
        self.pending_jobs: list[Any] = []
        self.active_jobs: list[Any] = []
        self.seen_prompts: list[list[int]] = []
        self.serial = 0
        self.padded_vocab_size = -(-tokenizer.tokenizer.get_vocab_size() // 32) * 32

    def num_remaining_jobs(self) -> int:
        return len(self.pending_jobs) + len(self.active_jobs)

    def num_active_jobs(self) -> int:
        return len(self.active_jobs)

    def num_pending_jobs(self) -> int:
        return len(self.pending_jobs)

    def enqueue(self, job: Any) -> int:
        need = len(job.prompt) + job.max_new_tokens
        assert need <= self.cache_tokens, f"job needs {need} tokens, cache holds {self.cache_tokens}"
        job.serial_number = self.serial
        self.serial += 1
        self.pending_jobs.append(job)
        self.runtime.log.jobs.append(job)
        return job.serial_number

    def cancel(self, job: Any) -> None:
        self.runtime.log.cancelled.append(job)
        if job in self.pending_jobs:
            self.pending_jobs.remove(job)
        elif job in self.active_jobs:
            self.active_jobs.remove(job)

    def _pages(self, job: Any) -> int:
        return -(-(len(job.prompt) + job.max_new_tokens) // PAGE_SIZE)

    def iterate(self) -> list[dict[str, Any]]:
        behaviour = self.runtime.behaviour
        if behaviour.step_delay_s:
            time.sleep(behaviour.step_delay_s)
        if behaviour.fail_iterate is not None:
            error, behaviour.fail_iterate = behaviour.fail_iterate, None
            raise error
        results: list[dict[str, Any]] = []
        used = sum(self._pages(j) for j in self.active_jobs)
        while self.pending_jobs and len(self.active_jobs) < self.max_batch_size:
            job = self.pending_jobs[0]
            if (used + self._pages(job)) * PAGE_SIZE > self.cache_tokens:
                break
            self.pending_jobs.pop(0)
            used += self._pages(job)
            self.active_jobs.append(job)
            job.cached_tokens = self._cached(job.prompt)
            self.seen_prompts.append(job.prompt)
            if job.grammar is not None:
                job.grammar.start(job, self)
            results.append(
                {
                    "job": job,
                    "stage": "started",
                    "eos": False,
                    "serial": job.serial_number,
                    "identifier": job.identifier,
                }
            )
        self.runtime.log.max_active = max(self.runtime.log.max_active, len(self.active_jobs))
        for job in list(self.active_jobs):
            results.append(self._step(job))
        return results

    def _cached(self, prompt: list[int]) -> int:
        best = 0
        for seen in self.seen_prompts:
            same = 0
            for a, b in zip(seen, prompt, strict=False):
                if a != b:
                    break
                same += 1
            best = max(best, same // PAGE_SIZE * PAGE_SIZE)
        return best

    def _choose(self, job: Any) -> int:
        position = job.new_tokens
        behaviour = self.runtime.behaviour
        constraint = job.grammar.allowed() if job.grammar is not None else None
        lead = self.tokenizer.tokenizer.encode(behaviour.lead, add_special_tokens=False).ids
        if position < len(lead) and (constraint is None or lead[position] in constraint[0]):
            return int(lead[position])
        stopping = behaviour.stop_after is not None and position >= behaviour.stop_after
        if job.stop_tokens and stopping and constraint is None:
            return int(job.stop_tokens[0])
        if constraint is not None:
            allowed, ending = constraint
            if ending & set(job.stop_tokens or ()):
                return min(ending)

            def rank(token: int) -> tuple[int, int]:
                text = self.tokenizer.tokenizer.decode([token])
                first = text[:1]
                return (_CLOSERS.index(first) if first and first in _CLOSERS else len(_CLOSERS), token)

            return min((t for t in allowed if t not in self.tokenizer.special_ids), key=rank)
        ordinary = self.tokenizer.ordinary_ids
        return ordinary[(sum(job.prompt) * 31 + position * 7 + (job.seed or 0)) % len(ordinary)]

    def _step(self, job: Any) -> dict[str, Any]:
        token = self._choose(job)
        base = {"job": job, "stage": "streaming", "serial": job.serial_number, "identifier": job.identifier}
        if token in job.stop_tokens:
            self.active_jobs.remove(job)
            return {
                **base,
                "eos": True,
                "eos_reason": "stop_token",
                "eos_triggering_token_id": token,
                **self._usage(job),
            }
        ended_by_filter = job.grammar.feed(token) if job.grammar is not None else False
        job.new_tokens += 1
        out = {
            **base,
            "eos": False,
            "text": self.tokenizer.tokenizer.decode([token]),
            "token_ids": FakeTensor([[token]]),
        }
        if job.return_probs:
            out["token_probs"] = FakeTensor([[0.5]])
        if job.return_top_tokens:
            top = [token, *self.tokenizer.ordinary_ids[: job.return_top_tokens - 1]]
            out["top_k_tokens"] = FakeTensor([[top]])
            out["top_k_probs"] = FakeTensor([[[0.5] + [0.1] * (len(top) - 1)]])
        if job.new_tokens >= job.max_new_tokens:
            self.active_jobs.remove(job)
            out.update(eos=True, eos_reason="max_new_tokens", **self._usage(job))
        elif ended_by_filter:
            self.active_jobs.remove(job)
            out.update(eos=True, eos_reason="end_filter", **self._usage(job))
        return out

    def _usage(self, job: Any) -> dict[str, Any]:
        return {"new_tokens": job.new_tokens, "prompt_tokens": len(job.prompt), "cached_tokens": job.cached_tokens}


class _JobState:
    """Fields both runtimes' jobs carry in the stand-in."""

    def _setup(
        self,
        input_ids: FakeTensor,
        max_new_tokens: int,
        stop_conditions: Any,
        seed: int | None,
        identifier: Any,
        return_top_tokens: int,
        return_probs: bool,
        grammar: JobFilters | None,
    ) -> None:
        assert isinstance(input_ids, FakeTensor) and len(input_ids.shape) == 2 and input_ids.shape[0] == 1, (
            "input_ids must be [1, seq_len] tensor"
        )
        self.prompt = input_ids.tolist()[0]
        self.max_new_tokens = max_new_tokens
        self.stop_tokens = [t for t in (stop_conditions or []) if isinstance(t, int)]
        self.seed = seed
        self.identifier = identifier
        self.return_top_tokens = return_top_tokens
        self.return_probs = return_probs
        self.grammar = grammar
        self.new_tokens = 0
        self.cached_tokens = 0
        self.serial_number = -1
