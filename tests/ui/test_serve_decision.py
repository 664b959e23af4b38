"""The app serves what its model list decided: the engine, context, GPU layers and KV cache type go to
the server in the config, and the server's own plan, run on that config, keeps them all."""

from __future__ import annotations

from pathlib import Path

from launcher.catalog.library import gguf_entry
from launcher.core.config import ServeConfig
from launcher.hardware.recorded import load_recorded
from launcher.server.pool.planning import plan
from launcher.ui.model_rows import ModelRow, decided_config


def _row(path: Path) -> ModelRow:
    entry = gguf_entry(path, source="imported")
    return ModelRow(key=f"local:{entry.name}", title=entry.name, subtitle="", kind="local", local=entry)


def test_the_app_sends_the_decision_and_the_server_keeps_it(tiny_gguf: Path) -> None:
    machine = load_recorded("rtx4090-desktop")
    form = ServeConfig(model=str(tiny_gguf), parallel=2)  # the form leaves engine, context, layers, KV open
    decided = decided_config(_row(tiny_gguf), machine, form)
    assert decided.engine == "llamacpp" and decided.kv_cache_type in ("f16", "q8_0")
    assert decided.context is not None and decided.gpu_layers == -1  # a tiny model fits on the 4090
    served = plan(decided, machine)
    assert served.config == decided  # nothing re-decided on the way down
    assert plan(form, machine).config == decided  # and `launcher serve` alone decides the same


def test_what_the_user_set_in_the_form_stays(tiny_gguf: Path) -> None:
    machine = load_recorded("cpu-avx2-laptop-16gb")
    form = ServeConfig(model=str(tiny_gguf), context=1024, gpu_layers=0, kv_cache_type="q8_0")
    decided = decided_config(_row(tiny_gguf), machine, form)
    assert (decided.context, decided.gpu_layers, decided.kv_cache_type) == (1024, 0, "q8_0")
    assert decided.engine == "llamacpp"


def test_a_model_without_known_numbers_is_left_to_the_server(tmp_path: Path) -> None:
    broken = tmp_path / "not-really.gguf"
    broken.write_bytes(b"GGUF")  # unreadable header: no architecture
    form = ServeConfig(model=str(broken))
    assert decided_config(_row(broken), load_recorded("cpu-avx2-laptop-16gb"), form) == form
