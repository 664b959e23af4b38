"""How an engine ranks itself for a machine: the advisor sorts engines by their `Preference` and names none.

Each `EngineSpec` carries a `prefer` hook. Given the `Situation` (the machine, whether a team shares
the server, whether it is a datacenter node, the model), it answers None (never recommend me here) or a
`Preference`: a rank (lower is tried first), the fit verdicts its options may win with (best tier
first), and the words the advisor shows when it wins or is passed over. So a plug-in engine that is
better on some machine ranks itself above the built-ins there, and the advisor picks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from launcher.hardware.machine import Machine


@dataclass(frozen=True)
class Situation:
    """What an engine's `prefer` hook may weigh."""

    machine: Machine
    model_id: str  # the catalog id being advised on
    team: bool  # many users share the server (`--users` at or above the team threshold)
    datacenter: bool  # a server node: HBM datacenter GPUs, or many big cards


@dataclass(frozen=True)
class Won:
    """What the reason for a pick may cite about the winning option."""

    verdict: str  # the fit verdict: "full_gpu", "unified", "cpu", "partial"
    gpu_layers: int
    total_layers: int


@dataclass(frozen=True)
class Preference:
    """How an engine wants to be tried on one machine for one model."""

    rank: int  # lower is tried first; the built-ins use 0 (hand-off) to 100 (llama.cpp, the fallback)
    tiers: tuple[tuple[str, ...], ...]  # the fit verdicts an option may win with, best tier first
    reason: Callable[[Won], str]  # why it was picked, for the recommendation's reasons
    none_fit: str = ""  # said when the catalog has weights for it and none fits (the advisor goes on)
    no_weights: str = ""  # said when the catalog has no weights in its formats for this model
    note: str = ""  # said whenever it is considered, before it wins or is passed over


Prefer = Callable[[Situation], Preference | None]
"""An engine's ranking hook: None when it should never be recommended in this situation."""


def never(situation: Situation) -> Preference | None:
    """The default: an engine that can be chosen by name but is never recommended."""
    del situation
    return None
