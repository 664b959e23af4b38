"""What a load takes where no plan decided: the one place "auto" becomes a KV type, and the
context an engine falls back on, both the advisor's."""

from __future__ import annotations

from launcher.advisor.plan import (
    SERVE_CONTEXTS,
    UNPLANNED_RESERVED_CONTEXT,
    plan_local,
    resolve_kv_type,
    unplanned_context,
)
from launcher.catalog.catalog import find
from launcher.engine_specs import get_spec, specs
from launcher.hardware.recorded import load_recorded


def test_auto_is_f16_and_a_set_type_stays() -> None:
    assert resolve_kv_type("auto") == resolve_kv_type(None) == "f16"
    assert [resolve_kv_type(kv) for kv in ("f16", "q8_0", "q4_0")] == ["f16", "q8_0", "q4_0"]


def test_an_unplanned_context_is_a_rung_of_the_ladder_within_the_models_own() -> None:
    assert UNPLANNED_RESERVED_CONTEXT in SERVE_CONTEXTS
    assert unplanned_context(131072, reserves_cache=False) == SERVE_CONTEXTS[0]
    assert unplanned_context(131072, reserves_cache=True) == UNPLANNED_RESERVED_CONTEXT
    assert unplanned_context(4096, reserves_cache=False) == unplanned_context(4096, reserves_cache=True) == 4096


def test_the_advisors_own_pick_for_a_load_is_never_a_child_engine() -> None:
    # A safetensors folder on an NVIDIA machine where vLLM is installed: `launcher serve FOLDER` loads in
    # this process or says why it cannot; vLLM serves it only when named (`--engine vllm`), with its own plan.
    machine = load_recorded("rtx4090-desktop")
    arch = find("qwen3-8b").architecture
    # vLLM and SGLang installed, no in-process engine for safetensors usable.
    status = {spec.name: None if spec.runs_as == "child" else "not installed" for spec in specs()}
    plan = plan_local(machine, "safetensors", arch, 16 * 2**30, status=status)
    assert get_spec(plan.engine).runs_as == "in_process" and "not usable here" in plan.reason
    named = plan_local(machine, "safetensors", arch, 16 * 2**30, status=status, engine="vllm")
    assert named.engine == "vllm"
