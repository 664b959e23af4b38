"""Engine + format + quant + context choice for a catalog model, hardware first.

Order of thought, as the domain notes ask: machine -> what fits -> what is fast -> engine.
The engines rank themselves (each spec's `prefer`, launcher/engine_specs/preference.py); the advisor
tries them in that order and takes the first whose options reach one of its fit tiers. The built-ins:
- Team / many users, or a datacenter node: vLLM or SGLang (a hand-off unless installed here).
- Apple Silicon: MLX when it fits in the GPU's share of unified memory; llama.cpp (Metal) otherwise.
- NVIDIA, compute capability >= 8.0, model fits in VRAM: ExLlamaV3 + EXL3.
- NVIDIA older than Ampere: EXL2 (legacy, archived upstream) when it fits, else GGUF.
- Anything needing CPU offload, non-NVIDIA GPUs, CPU-only: llama.cpp + GGUF.
Within a format the quant is the highest-quality one up to ~6.6 bits that fits fully; below
~3.5 bits quality drops noticeably, so those are picked only when nothing else fits.
With an engine that quantizes its KV cache (llama.cpp), a q8_0 KV cache (near-lossless, about half
the memory of f16) comes before a smaller weights quant, a partial offload or a smaller context.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from launcher.advisor.calibration_store import CalibrationChoice, resolve_calibration
from launcher.advisor.draft import DraftPick, propose_draft
from launcher.advisor.fit import VERDICT_LABELS, VERDICT_RANK
from launcher.advisor.fit_advice import advice, full_gpu_hint, variant
from launcher.advisor.options import (
    KV_LEVER,
    Option,
    candidate_options,
    kv_lever_applies,
    kv_lever_cost,
    ranked_engines,
)
from launcher.advisor.plan import SERVE_CONTEXTS, context_ladder
from launcher.catalog.schema import CatalogModel
from launcher.core.errors import CatalogError, in_context
from launcher.core.units import format_bytes
from launcher.engine_specs import EngineStatus
from launcher.engine_specs.preference import Situation, Won
from launcher.hardware.machine import Machine

TEAM_CONTEXTS = (8192, 4096, 2048)
"""A team's requests rarely all hold a full 32k at once: its shared KV cache is sized for 8k each."""
QUALITY_CEILING_BPW = 6.7  # above this, more bits cost speed for little quality
QUALITY_FLOOR_BPW = 3.5
TEAM_USERS = 8


@dataclass(frozen=True)
class Recommendation:
    """The advisor's answer for one model on one machine."""

    model_id: str
    model_name: str
    context: int
    users: int
    choice: Option
    reasons: tuple[str, ...]
    alternatives: tuple[Option, ...]
    # The catalog's draft model (speculative decoding) when it fits beside the choice; its memory is choice.fit.draft.
    draft: DraftPick | None = None

    @property
    def fits(self) -> bool:
        """True when the chosen option loads here."""
        return self.choice.fit.fits

    @property
    def kv_type(self) -> str:
        """KV cache type to serve the choice with (`launcher serve --kv-cache-type`)."""
        return self.choice.kv_type


def _quality_key(option: Option) -> tuple[int, float]:
    # Prefer the sweet spot (3.5..6.7 bpw, highest first), then lower-quality quants, then bigger ones.
    bpw = option.bits_per_weight
    if QUALITY_FLOOR_BPW <= bpw <= QUALITY_CEILING_BPW:
        return (0, -bpw)
    if bpw < QUALITY_FLOOR_BPW:
        return (1, -bpw)
    return (2, bpw)


def _speed_key(option: Option) -> tuple[int, float]:
    # When weights stream from CPU RAM, every bit costs decode speed: take the leanest quant that keeps
    # quality (>= 4.5 bpw, i.e. Q4_K_M-class), then leaner ones, then the rest.
    bpw = option.bits_per_weight
    if 4.5 <= bpw <= QUALITY_CEILING_BPW:
        return (0, bpw)
    if QUALITY_FLOOR_BPW <= bpw < 4.5:
        return (1, -bpw)
    return (2, bpw)


def _ranking(verdicts: tuple[str, ...]) -> Callable[[Option], tuple[int, float]]:
    on_gpu = all(v in ("full_gpu", "unified") for v in verdicts)
    return _quality_key if on_gpu else _speed_key


def _best(options: list[Option], verdicts: tuple[str, ...]) -> Option | None:
    fitting = [o for o in options if o.fit.verdict in verdicts]
    if not fitting:
        return None
    return min(fitting, key=_ranking(verdicts))


Tiers = tuple[tuple[str, ...], ...]


def _pick_in_tiers(own: list[Option], lever: list[Option], tiers: Tiers) -> tuple[Option | None, list[str]]:
    """One engine's pick: best tier first; a q8_0 KV cache (`lever`, empty unless the engine's spec has
    `quantized_kv`) when f16 would need a quant of a lower quality band (below ~3.5 bits) or a lower tier
    (partial offload, or nothing at this context). Within a band it is not worth it: Q6_K + q8_0 KV
    instead of Q5_K_M decodes ~13% slower for little quality."""
    for verdicts in tiers:
        pick = _best(own, verdicts)
        smaller_kv = _best(lever, verdicts)
        key = _ranking(verdicts)
        if smaller_kv is not None and (pick is None or key(smaller_kv)[0] < key(pick)[0]):
            return smaller_kv, [_lever_reason(smaller_kv, pick, own, tiers)]
        if pick is not None:
            return pick, []
    return None, []


def _lever_reason(chosen: Option, f16_pick: Option | None, own: list[Option], tiers: Tiers) -> str:
    same_quant = next(o for o in own if o.quant == chosen.quant)
    if f16_pick is None:
        f16_pick = next((p for tier in tiers if (p := _best(own, tier)) is not None), None)
    if f16_pick is None:
        without = f"nothing would fit at {chosen.fit.context // 1024}k context"
    else:
        without = f"the pick would be {f16_pick.quant} ({f16_pick.fit.label})"
    where = {
        "full_gpu": "fits fully on the GPU",
        "unified": "fits in unified memory",
        "cpu": "runs on the CPU",
        "partial": "runs with a partial offload",
    }[chosen.fit.verdict]
    cost = kv_lever_cost(same_quant.fit.kv_bytes, chosen.fit.kv_bytes, chosen.fit.context)
    return f"{chosen.quant} {where} with {cost}. With an f16 KV cache {without}."


def _pick(situation: Situation, options: list[Option], lever: list[Option]) -> tuple[Option | None, list[str]]:
    """The first engine, in the order the engines rank themselves, whose options reach one of its tiers,
    with the reasons each engine gives on the way (why it is out, why it won)."""
    by_engine: dict[str, list[Option]] = defaultdict(list)
    for option in options:
        by_engine[option.engine].append(option)
    lever_by_engine: dict[str, list[Option]] = defaultdict(list)
    for option in lever:
        lever_by_engine[option.engine].append(option)
    reasons: list[str] = []
    for spec, preference in ranked_engines(situation):
        if preference.note:
            reasons.append(preference.note)
        own = by_engine[spec.name]
        pick, lever_reasons = _pick_in_tiers(own, lever_by_engine[spec.name], preference.tiers)
        if pick is not None:
            why = preference.reason(Won(pick.fit.verdict, pick.fit.gpu_layers, pick.fit.total_layers))
            reasons += [why] if why else []
            return pick, reasons + lever_reasons
        passed_over = preference.none_fit if own else preference.no_weights
        if passed_over:
            reasons.append(passed_over)
    return None, reasons


def recommend(
    machine: Machine,
    model: CatalogModel,
    *,
    context: int | None = None,
    users: int = 1,
    status: EngineStatus | None = None,
    calibration: CalibrationChoice = "stored",
) -> Recommendation:
    """Recommend engine + format + quant + context for `model` on `machine`, with reasons and alternatives.

    `status` maps engine names to None (usable) or the reason they are not; without it every
    engine is assumed installable, which is right for advice about another machine.
    `calibration` narrows speed predictions with runs measured on `machine` ("stored": the data
    folder's runs for its fingerprint, so another machine's advice is never skewed by this one's;
    None: the model alone). It never changes which option is picked for memory reasons.
    """
    if users < 1:
        raise CatalogError("users must be at least 1")
    runs = resolve_calibration(machine, calibration)
    team = users >= TEAM_USERS
    situation = Situation.of(machine, model.id, team=team)
    if context:
        contexts = [context]
    else:
        contexts = context_ladder(model.architecture.max_context, TEAM_CONTEXTS if team else SERVE_CONTEXTS)
    chosen: Option | None = None
    draft: DraftPick | None = None
    options: list[Option] = []
    reasons: list[str] = []
    used_context = contexts[0]
    for ctx in contexts:
        options = candidate_options(
            machine, model, context=ctx, parallel=users, status=status, team=team, calibration=runs
        )
        if not options:
            raise CatalogError(f"{model.name} has no weights in a format this machine can run.")
        lever = [
            variant(machine, model, o, users, status, runs, kv_type=KV_LEVER)
            for o in options
            if kv_lever_applies(o.engine)
        ]
        chosen, reasons = _pick(situation, options, lever)
        used_context = ctx
        if chosen is not None:
            break
    if chosen is None:
        # Nothing fits at any context: report the smallest quant at the asked/first context, with advice.
        options = candidate_options(
            machine, model, context=contexts[0], parallel=users, status=status, team=team, calibration=runs
        )
        used_context = contexts[0]
        base = min(options, key=lambda o: o.fit.needed_bytes)
        chosen = replace(
            base, fit=replace(base.fit, advice=advice(machine, model, base, used_context, users, status, runs))
        )
        reasons = [f"Will not fit: {chosen.fit.advice[0]}."]
    else:
        if context is None and used_context < contexts[0]:
            reasons.append(f"Context lowered to {used_context // 1024}k so the KV cache fits.")
        reasons.append(
            f"{chosen.quant} ({chosen.bits_per_weight:.1f} bits/weight, {format_bytes(chosen.weights_bytes)}): "
            f"{VERDICT_LABELS[chosen.fit.verdict]}; {chosen.speed.summary()}."
        )
        if model.architecture.is_moe:
            reasons.append(
                f"Mixture of experts: all {model.architecture.params_total_b:g}B parameters must fit, but only "
                f"{model.architecture.params_active_b:g}B are read per token, so it decodes like a small model."
            )
        if chosen.fit.verdict == "partial":
            reasons.extend(full_gpu_hint(machine, model, chosen, used_context, users, status, runs))
        if chosen.unavailable_reason:
            reasons.append(in_context(f"{chosen.engine_label} is not usable here yet", chosen.unavailable_reason))
        draft, draft_reason = propose_draft(model, chosen.engine, chosen.format, chosen.fit)
        if draft is not None:
            options = [o for o in options if o is not chosen]  # the choice, now with its draft line
            chosen = replace(chosen, fit=replace(chosen.fit, draft=draft.memory))
        if draft_reason:
            reasons.append(draft_reason)
    others = sorted(
        (o for o in options if o is not chosen),
        key=lambda o: (
            VERDICT_RANK[o.fit.verdict],
            not o.runnable_here,
            _quality_key(o),
            -o.speed.decode_high,
        ),
    )
    alternatives = _diverse(others)
    return Recommendation(
        model_id=model.id,
        model_name=model.name,
        context=used_context,
        users=users,
        choice=chosen,
        reasons=tuple(reasons),
        alternatives=tuple(alternatives),
        draft=draft,
    )


def _diverse(options: list[Option], limit: int = 6) -> list[Option]:
    """Top alternatives, at most two per engine so other engines are shown too."""
    out: list[Option] = []
    per_engine: dict[str, int] = {}
    for option in options:
        if per_engine.get(option.engine, 0) >= 2:
            continue
        per_engine[option.engine] = per_engine.get(option.engine, 0) + 1
        out.append(option)
        if len(out) == limit:
            break
    return out
