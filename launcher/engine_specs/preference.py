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

DATACENTER_GPUS = ("H100", "H200", "H20", "A100", "B100", "B200", "GB200", "L40", "MI300", "MI250")
"""Names of GPUs only found in servers: a machine with one is a datacenter node, not a desktop."""


def is_datacenter(machine: Machine) -> bool:
    """A server node (HBM datacenter GPUs, or many big cards) rather than a desktop."""
    big_cards = [g for g in machine.gpus if g.memory_total >= 40 * 1024**3]
    return any(n in g.name for g in machine.gpus for n in DATACENTER_GPUS) or len(big_cards) >= 4


@dataclass(frozen=True)
class Situation:
    """What an engine's `prefer` hook may weigh."""

    machine: Machine
    model_id: str  # the catalog id being advised on
    team: bool  # many users share the server (`--users` at or above the team threshold)
    datacenter: bool  # a server node: HBM datacenter GPUs, or many big cards

    @classmethod
    def of(cls, machine: Machine, model_id: str, *, team: bool) -> Situation:
        """The situation of advising on `model_id` for `machine` (a datacenter node or not, as its GPUs say)."""
        return cls(machine=machine, model_id=model_id, team=team, datacenter=is_datacenter(machine))


@dataclass(frozen=True)
class Won:
    """What the reason for a pick may cite about the winning option."""

    verdict: str  # the fit verdict: "full_gpu", "unified", "cpu", "partial"
    gpu_layers: int
    total_layers: int


@dataclass(frozen=True)
class Offer:
    """Weights an engine proposes beyond the catalog's quant formats: a safetensors checkpoint
    ("fp8" / "FP8", "awq" / "AWQ", "bf16" / "BF16") that the catalog lists under `safetensors`
    or that is the model's upstream repo."""

    format: str
    quant: str


@dataclass(frozen=True)
class Preference:
    """How an engine wants to be tried on one machine for one model."""

    rank: int  # lower is tried first; the built-ins use 0 (hand-off) to 100 (llama.cpp, the fallback)
    tiers: tuple[tuple[str, ...], ...]  # the fit verdicts an option may win with, best tier first
    reason: Callable[[Won], str]  # why it was picked, for the recommendation's reasons ("": nothing to add)
    none_fit: str = ""  # said when the catalog has weights for it and none fits (the advisor goes on)
    no_weights: str = ""  # said when the catalog has no weights in its formats for this model
    note: str = ""  # said whenever it is considered, before it wins or is passed over
    offers: tuple[Offer, ...] = ()  # options besides the catalog's quants in its formats
    label: str = ""  # how the advice names its options, when not by the spec's label ("vLLM / SGLang")


Prefer = Callable[[Situation], Preference | None]
"""An engine's ranking hook: None when it should never be recommended in this situation."""


def never(situation: Situation) -> Preference | None:
    """The default: an engine that can be chosen by name but is never recommended."""
    del situation
    return None
