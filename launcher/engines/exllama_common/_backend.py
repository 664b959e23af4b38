"""The runtime seam inside the ExLlama engines: what the shared scheduler needs from a runtime.

`exllamav3/engine.py` and `exllamav2/engine.py` each implement `Backend` over their runtime's
dynamic generator; the scheduler and LoadedModel in this package are written once against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from launcher.engines.base import SamplingParams


@dataclass(frozen=True)
class JobSpec:
    """One generation, in runtime-neutral terms, for `Backend.make_job`."""

    prompt: list[int]
    max_new_tokens: int
    stop_tokens: tuple[int, ...]  # empty when the request ignores EOS
    sampling: SamplingParams
    grammar: str | None  # llguidance Lark grammar (see _constraints) or None
    top_logprobs: int | None  # None: no logprobs; N: the chosen token's and the top-N alternatives'
    identifier: object  # handed back in every result dict of this job
    triggers: tuple[str, ...] = ()  # a lazy grammar's triggers (Constraint.triggers); () = constrained throughout


class Backend(Protocol):
    """A loaded runtime: tokenizer, generator and cache. Only the scheduler thread calls the generator."""

    version: str
    lazy_constraints: bool  # make_job can run lazy grammars (JobSpec.triggers)

    def encode(self, text: str, *, add_bos: bool, special: bool) -> list[int]:
        """Text to token ids with the runtime's tokenizer (special-token text parsed when `special`)."""
        ...

    def decode(self, tokens: list[int]) -> str:
        """Token ids to text, special tokens written out."""
        ...

    def make_job(self, spec: JobSpec) -> Any:
        """The runtime's job object; raises ValueError when the request cannot run (bad grammar...)."""
        ...

    def enqueue(self, job: Any) -> None:
        """generator.enqueue(job)."""
        ...

    def cancel(self, job: Any) -> None:
        """generator.cancel(job): frees its cache pages."""
        ...

    def iterate(self) -> list[dict[str, Any]]:
        """generator.iterate(): one step for every active job; result dicts as documented upstream."""
        ...

    def memory(self) -> dict[str, int]:
        """Engine-specific memory numbers for /metrics (bytes by kind)."""
        ...

    def close(self) -> None:
        """Free the generator, cache and model."""
        ...
