"""What a load takes where no plan decided: the one place "auto" becomes a KV type, and the
context an engine falls back on, both the advisor's."""

from __future__ import annotations

from launcher.advisor.plan import SERVE_CONTEXTS, UNPLANNED_RESERVED_CONTEXT, resolve_kv_type, unplanned_context


def test_auto_is_f16_and_a_set_type_stays() -> None:
    assert resolve_kv_type("auto") == resolve_kv_type(None) == "f16"
    assert [resolve_kv_type(kv) for kv in ("f16", "q8_0", "q4_0")] == ["f16", "q8_0", "q4_0"]


def test_an_unplanned_context_is_a_rung_of_the_ladder_within_the_models_own() -> None:
    assert UNPLANNED_RESERVED_CONTEXT in SERVE_CONTEXTS
    assert unplanned_context(131072, reserves_cache=False) == SERVE_CONTEXTS[0]
    assert unplanned_context(131072, reserves_cache=True) == UNPLANNED_RESERVED_CONTEXT
    assert unplanned_context(4096, reserves_cache=False) == unplanned_context(4096, reserves_cache=True) == 4096
