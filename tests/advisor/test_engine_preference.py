"""The advisor names no engine: it tries the engines in the order their specs' `prefer` ranks them, so a
plug-in engine that ranks itself first on a machine is recommended there, and one that ranks itself
last is not."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from launcher import engine_specs
from launcher.advisor import recommend
from launcher.catalog.catalog import find
from launcher.engine_specs import EngineSpec
from launcher.engine_specs.preference import Preference, Situation, Won
from launcher.hardware.recorded import load_recorded
from tests.advisor.machines import desktop_4090, laptop_cpu

STANDIN = "standin"
GPU_OR_CPU = (("full_gpu", "unified"), ("cpu",))


def _spec(rank: int, *, tiers: tuple[tuple[str, ...], ...] = GPU_OR_CPU, only_on_cpu: bool = False) -> EngineSpec:
    """A GGUF engine, "installed" (its runtime module is one that is there), ranking itself at `rank`."""

    def prefer(situation: Situation) -> Preference | None:
        if only_on_cpu and situation.machine.gpus:
            return None
        return Preference(
            rank=rank,
            tiers=tiers,
            reason=lambda won: f"Stand-in wins with {won.verdict} for {situation.model_id}.",
            none_fit="No stand-in quant fits.",
            note="The stand-in was asked.",
        )

    return EngineSpec(
        name=STANDIN,
        label="Stand-in",
        formats=("gguf",),
        factory="tests.advisor.test_engine_preference:NotLoaded",  # the advisor never loads an engine
        runtime_module="json",
        distribution="pytest",
        pip_extra="standin",
        prefer=prefer,
    )


@pytest.fixture
def plug_in() -> Iterator[Callable[[EngineSpec], None]]:
    """Registers a stand-in spec for one test and always removes it again."""
    try:
        yield engine_specs.register
    finally:
        engine_specs.unregister(STANDIN)


def test_a_plug_in_that_ranks_itself_first_is_recommended(plug_in: Callable[[EngineSpec], None]) -> None:
    plug_in(_spec(rank=-1))
    rec = recommend(laptop_cpu(), find("qwen3-8b"), calibration=None)
    assert rec.choice.engine == STANDIN
    assert rec.choice.format == "gguf" and rec.choice.fit.verdict == "cpu"
    assert rec.choice.label.startswith("Stand-in + GGUF")
    assert rec.reasons[:2] == ("The stand-in was asked.", "Stand-in wins with cpu for qwen3-8b.")
    assert any(alt.engine == "llamacpp" for alt in rec.alternatives)  # the built-in is still an alternative


def test_a_plug_in_that_ranks_itself_last_is_not_recommended(plug_in: Callable[[EngineSpec], None]) -> None:
    plug_in(_spec(rank=1000))
    rec = recommend(laptop_cpu(), find("qwen3-8b"), calibration=None)
    assert rec.choice.engine == "llamacpp"
    assert "The stand-in was asked." not in rec.reasons  # llama.cpp won before the stand-in's turn
    assert any(alt.engine == STANDIN for alt in rec.alternatives)  # listed, never picked


def test_a_plug_in_ranks_itself_only_where_it_says(plug_in: Callable[[EngineSpec], None]) -> None:
    plug_in(_spec(rank=-1, only_on_cpu=True))
    assert recommend(laptop_cpu(), find("qwen3-8b"), calibration=None).choice.engine == STANDIN
    # On the GPU desktop its `prefer` declines, so the built-ins' order holds: ExLlamaV3 fits in VRAM.
    assert recommend(desktop_4090(), find("qwen3-8b"), calibration=None).choice.engine == "exllamav3"


def test_a_first_ranked_plug_in_that_reaches_none_of_its_tiers_is_passed_over(
    plug_in: Callable[[EngineSpec], None],
) -> None:
    plug_in(_spec(rank=-1, tiers=(("full_gpu",),)))  # on the GPU only: on a laptop none of its options wins
    rec = recommend(laptop_cpu(), find("qwen3-8b"), calibration=None)
    assert rec.choice.engine == "llamacpp"
    assert rec.reasons[:3] == (
        "The stand-in was asked.",
        "No stand-in quant fits.",
        "CPU only: llama.cpp with a GGUF K-quant uses AVX2/AVX512/NEON kernels.",
    )


def test_the_built_in_reasons_come_from_the_specs() -> None:
    situation = Situation.of(desktop_4090(), "qwen3-8b", team=False)
    llamacpp = engine_specs.get_spec("llamacpp").prefer(situation)
    assert llamacpp is not None
    assert llamacpp.reason(Won(verdict="partial", gpu_layers=20, total_layers=40)).startswith(
        "Only 20 of 40 layers fit on the GPU"
    )
    assert engine_specs.get_spec("mlx").prefer(situation) is None  # MLX ranks itself on Macs only


def test_the_hand_off_comes_from_the_vllm_spec_and_is_launchable_where_vllm_is_usable_here() -> None:
    machine, model = load_recorded("rtx4090-desktop"), find("qwen3-8b")
    usable = recommend(machine, model, users=8, status={"vllm": None, "llamacpp": None}, calibration=None)
    assert usable.choice.engine == "vllm" and usable.choice.label.startswith("vLLM / SGLang + ")
    assert usable.choice.launchable and usable.choice.runnable_here  # `launcher serve --engine vllm` runs it
    missing = {"vllm": "not installed: pip install 'launcher[vllm]'", "llamacpp": None}
    hand_off = recommend(machine, model, users=8, status=missing, calibration=None).choice
    assert hand_off.engine == "vllm"
    assert not hand_off.launchable and hand_off.unavailable_reason is None  # `launcher handoff` plans it
    assert recommend(machine, model, users=1, calibration=None).choice.engine == "exllamav3"  # one user: no team
    # Advice about another machine (a recorded one): whether vLLM is installed here says nothing there.
    elsewhere = engine_specs.engine_status(machine, this_process=False)
    there = recommend(machine, model, users=8, status=elsewhere, calibration=None).choice
    assert there.engine == "vllm" and not there.launchable and there.unavailable_reason is None
