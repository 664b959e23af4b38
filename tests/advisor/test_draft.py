"""The advisor's draft model (speculative decoding): proposed beside a model when it fits, with its own
line in the memory breakdown; planned for a serve only from a copy already on disk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from launcher.advisor import ServePlan, plan_for_config, recommend
from launcher.advisor.draft import DRAFT_ENGINES, draft_model, local_draft, propose_draft
from launcher.advisor.fit import fit_draft, fit_model, kv_cache_bytes
from launcher.catalog.catalog import default_catalog
from launcher.catalog.library import LibraryEntry, scan_hf_cache
from launcher.catalog.schema import Catalog, CatalogModel
from launcher.cli.recommend import format_recommendation, recommendation_json
from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.core.units import GIB, MIB
from launcher.hardware.machine import Machine
from tests.advisor.machines import desktop_4090, laptop_cpu, macbook_m2
from tests.catalog.helpers import make_cached_repo, write_moe_gguf

CODER_DRAFT_REPO = "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF"
CODER_DRAFT_FILE = "Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"
CODER_7B_Q4 = 4_680_000_000  # bytes of a Qwen2.5-Coder-7B Q4_K_M file


def _model(model_id: str) -> CatalogModel:
    found = default_catalog().get(model_id)
    assert found is not None
    return found


def _config(**fields: object) -> ServeConfig:
    return ServeConfig(model="qwen2.5-coder-7b", **fields)  # type: ignore[arg-type]


def _library_entry(path: Path, catalog_id: str = "qwen2.5-coder-0.5b", quant: str = "Q8_0") -> LibraryEntry:
    model = LocalModel(path=path, format="gguf", name=f"{CODER_DRAFT_REPO}:{quant}", quant=quant, catalog_id=catalog_id)
    return LibraryEntry(model=model, source="hf-cache", size_bytes=531_000_000, repo_id=CODER_DRAFT_REPO)


def _plan(
    machine: Machine, config: ServeConfig, library: list[LibraryEntry] | None, catalog_id: str | None = None
) -> ServePlan:
    coder = _model("qwen2.5-coder-7b")
    return plan_for_config(
        machine,
        "gguf",
        coder.architecture,
        CODER_7B_Q4,
        config,
        None,
        catalog_id=catalog_id or coder.id,
        library=library,
    )


# ------------------------------------------------------------------ recommend ----


def test_a_gpu_with_room_gets_the_draft_with_its_own_memory_line() -> None:
    coder = _model("qwen2.5-coder-7b")
    rec = recommend(desktop_4090(), coder, calibration=None)
    assert (rec.choice.engine, rec.choice.format, rec.choice.fit.verdict) == ("llamacpp", "gguf", "full_gpu")
    assert rec.draft is not None
    assert (rec.draft.model.id, rec.draft.quant) == ("qwen2.5-coder-0.5b", "Q8_0")
    assert rec.draft.source == f"{CODER_DRAFT_REPO}:{CODER_DRAFT_FILE}"
    memory = rec.choice.fit.draft
    assert memory is rec.draft.memory and memory.fits
    # 24 layers x 2 KV heads x 64 x K and V x 2 bytes = 12 KiB a token: 384 MiB at 32k, as llama.cpp sizes it.
    assert memory.kv_cache == kv_cache_bytes(rec.draft.model.architecture, 32768) == 384 * MIB
    assert memory.device == "GPU 0"
    assert memory.used < 1.5 * GIB
    # The model's own total is unchanged; the draft is added on its own.
    assert rec.choice.fit.with_draft_bytes == rec.choice.fit.needed_bytes + memory.used
    lines = rec.choice.fit.breakdown().splitlines()
    assert len(lines) == len(rec.choice.fit.devices) + 1
    assert lines[-1].startswith("draft Qwen2.5 Coder 0.5B Instruct Q8_0 on GPU 0: weights ")
    assert "(over)" not in lines[-1]
    text = format_recommendation(rec)
    assert "    draft Qwen2.5 Coder 0.5B Instruct Q8_0 on GPU 0" in text
    assert "--draft qwen2.5-coder-0.5b" in text
    assert any(reason.startswith("Draft model: Qwen2.5 Coder 0.5B Instruct Q8_0") for reason in rec.reasons)
    payload = recommendation_json(rec)
    assert payload["draft"] == {"model": "qwen2.5-coder-0.5b", "quant": "Q8_0", "source": rec.draft.source}
    assert payload["choice"]["fit"]["draft"]["used"] == memory.used
    # The choice with its draft line is not listed again among the alternatives.
    assert all(alt.quant != rec.choice.quant or alt.engine != rec.choice.engine for alt in rec.alternatives)


def test_a_machine_without_room_gets_no_draft_and_is_told_why() -> None:
    # Qwen3 8B Q4_K_M on a 16 GB CPU laptop leaves ~200 MiB: the 0.6B draft's KV cache alone is 3.5 GiB at 32k.
    rec = recommend(laptop_cpu(16), _model("qwen3-8b"), calibration=None)
    assert rec.choice.fit.verdict == "cpu" and rec.fits
    assert rec.draft is None and rec.choice.fit.draft is None
    assert not any(line.startswith("draft") for line in rec.choice.fit.breakdown().splitlines())
    why = [r for r in rec.reasons if "draft" in r]
    assert len(why) == 1 and why[0].startswith("No room for the draft model Qwen3 0.6B")
    assert recommendation_json(rec)["draft"] is None


def test_the_same_cpu_with_more_ram_gets_the_draft() -> None:
    rec = recommend(laptop_cpu(64), _model("qwen3-8b"), calibration=None)
    assert rec.choice.fit.verdict == "cpu"
    assert rec.draft is not None and rec.draft.model.id == "qwen3-0.6b"
    assert rec.choice.fit.breakdown().splitlines()[-1].startswith("draft Qwen3 0.6B Q8_0 on CPU RAM")


def test_a_partial_offload_gets_no_draft() -> None:
    rec = recommend(desktop_4090(), _model("llama-3.3-70b"), calibration=None)
    assert rec.choice.fit.verdict == "partial"
    assert rec.draft is None and rec.choice.fit.draft is None
    assert any(r.startswith("No draft model: Llama 3.2 1B Instruct would take GPU memory") for r in rec.reasons)


def test_a_mac_with_room_gets_the_mlx_draft_with_its_memory_line() -> None:
    # Qwen3 8B at 4bit on a 24 GB M2 leaves ~6 GiB of the GPU's share: the 0.6B at 8bit needs 4.6 GiB at 32k
    # (3.5 GiB of it KV cache).
    assert "mlx" in DRAFT_ENGINES
    rec = recommend(macbook_m2(24), _model("qwen3-8b"), calibration=None)
    assert (rec.choice.engine, rec.choice.format, rec.choice.fit.verdict) == ("mlx", "mlx", "unified")
    assert rec.draft is not None
    assert (rec.draft.model.id, rec.draft.quant) == ("qwen3-0.6b", "8bit")
    assert rec.draft.source == "mlx-community/Qwen3-0.6B-8bit"
    memory = rec.choice.fit.draft
    assert memory is rec.draft.memory and memory.fits
    assert memory.kv_cache == kv_cache_bytes(rec.draft.model.architecture, 32768) == 3584 * MIB
    assert memory.checkpoints == 0  # llama.cpp's sliding-window checkpoints; Qwen3 has no such layers anyway
    assert rec.choice.fit.breakdown().splitlines()[-1].startswith("draft Qwen3 0.6B 8bit on Apple M2 unified memory")
    why = [r for r in rec.reasons if "draft" in r.lower()]
    assert len(why) == 1 and why[0].startswith("Draft model: Qwen3 0.6B 8bit"), why
    assert "MLX (mlx-lm) checks" in why[0]
    # The catalog id also names GGUF copies: the MLX one is pulled and named by its repo.
    assert (
        "`launcher pull qwen3-0.6b --format mlx --quant 8bit`, then `--draft mlx-community/Qwen3-0.6B-8bit`" in why[0]
    )
    payload = recommendation_json(rec)
    assert payload["draft"] == {"model": "qwen3-0.6b", "quant": "8bit", "source": "mlx-community/Qwen3-0.6B-8bit"}


def test_a_mac_without_room_gets_no_mlx_draft_and_is_told_why() -> None:
    # On a 16 GB M2 the 8B leaves under 1 GiB: neither the 8bit nor the 4bit draft fits (the 4bit is the last tried).
    rec = recommend(macbook_m2(16), _model("qwen3-8b"), calibration=None)
    assert rec.choice.engine == "mlx" and rec.fits
    assert rec.draft is None and rec.choice.fit.draft is None
    why = [r for r in rec.reasons if "draft" in r]
    assert len(why) == 1 and why[0].startswith("No room for the draft model Qwen3 0.6B 4bit beside it"), why


def test_mlx_proposes_no_draft_for_sliding_window_models() -> None:
    # MLX keeps Gemma 3's sliding-window layers in rotating caches, which cannot take back rejected tokens.
    rec = recommend(macbook_m2(32), _model("gemma-3-12b"), calibration=None)
    assert rec.choice.engine == "mlx" and rec.fits
    assert rec.draft is None and rec.choice.fit.draft is None
    why = [r for r in rec.reasons if "draft" in r]
    assert len(why) == 1 and "sliding-window layers in rotating caches" in why[0], why


def test_a_draft_without_mlx_weights_is_not_proposed_for_mlx() -> None:
    catalog = default_catalog()
    qwen3 = _model("qwen3-8b")
    models = [m.model_copy(update={"mlx": {}}) if m.id == "qwen3-0.6b" else m for m in catalog.models]
    gguf_only = Catalog(models=models)
    fit = recommend(macbook_m2(32), qwen3, calibration=None).choice.fit
    assert propose_draft(qwen3, "mlx", "mlx", replace(fit, draft=None), catalog=gguf_only) == (None, None)
    pick, _ = propose_draft(qwen3, "mlx", "mlx", replace(fit, draft=None), catalog=catalog)
    assert pick is not None and pick.quant == "8bit"


def test_a_model_without_a_catalog_draft_says_nothing_about_drafts() -> None:
    rec = recommend(desktop_4090(), _model("gpt-oss-20b"), calibration=None)
    assert rec.draft is None and rec.choice.fit.draft is None
    assert not any("draft" in r.lower() for r in rec.reasons)


def test_the_draft_goes_to_a_smaller_quant_when_q8_0_does_not_fit() -> None:
    coder = _model("qwen2.5-coder-7b")
    machine = desktop_4090()
    rec = recommend(machine, coder, calibration=None)
    assert rec.draft is not None
    base = replace(rec.choice.fit, draft=None)
    q8 = rec.draft.memory
    # Leave room for the Q4_K_M draft but not the Q8_0 one.
    gpu = base.devices[0]
    tight_room = q8.used - 40 * MIB
    tight = replace(base, devices=(replace(gpu, free=gpu.used + tight_room),))
    pick, reason = propose_draft(coder, "llamacpp", "gguf", tight)
    assert pick is not None and pick.quant == "Q4_K_M", reason
    assert pick.memory.room == tight_room


def test_fit_draft_sizes_kv_for_every_parallel_sequence_and_skips_partial_offloads() -> None:
    draft = _model("qwen2.5-coder-0.5b")
    coder = _model("qwen2.5-coder-7b")
    fit = fit_model(desktop_4090(), coder.architecture, CODER_7B_Q4, context=8192, parallel=4, sliding="llamacpp")
    memory = fit_draft(fit, draft.architecture, 500_000_000, name="d")
    assert memory is not None
    assert memory.kv_cache == kv_cache_bytes(draft.architecture, 8192, 4) == 384 * MIB
    assert memory.room == fit.devices[0].free - fit.devices[0].used
    partial = fit_model(desktop_4090(vram_free_gib=3), coder.architecture, CODER_7B_Q4, context=8192)
    assert partial.verdict == "partial"
    assert fit_draft(partial, draft.architecture, 500_000_000, name="d") is None


def test_draft_model_answers_from_the_catalog() -> None:
    found = draft_model("qwen2.5-coder-32b")
    assert found is not None and found.id == "qwen2.5-coder-0.5b"
    assert draft_model("qwen2.5-coder-0.5b") is None
    assert draft_model("not-a-model") is None


# ------------------------------------------------------------------ the serve plan ----


def test_fill_sets_the_draft_when_a_copy_is_in_the_library(tmp_path: Path) -> None:
    path = tmp_path / CODER_DRAFT_FILE
    plan = _plan(desktop_4090(), _config(), [_library_entry(path)])
    assert plan.draft == str(path)
    assert plan.fit.draft is not None and plan.fit.draft.fits
    assert plan.fit.draft.weights == 531_000_000  # the file on disk, not the catalog's estimate
    assert "draft model Qwen2.5 Coder 0.5B Instruct Q8_0" in plan.reason
    assert plan.fit.breakdown().splitlines()[-1].startswith("draft Qwen2.5 Coder 0.5B Instruct Q8_0 on GPU 0")
    filled = plan.fill(_config())
    assert filled.draft == str(path)
    # What the config names stays; modes without a draft model get none.
    assert plan.fill(_config(draft="llama-3.2-1b")).draft == "llama-3.2-1b"
    assert plan.fill(_config(speculative="off")).draft is None
    assert plan.fill(_config(speculative="ngram")).draft is None
    assert plan.fill(_config(speculative="draft")).draft == str(path)


def test_fill_leaves_the_draft_empty_without_a_local_copy(tmp_path: Path) -> None:
    machine = desktop_4090()
    for library in (None, [], [_library_entry(tmp_path / "other.gguf", catalog_id="qwen3-0.6b")]):
        plan = _plan(machine, _config(), library)
        assert plan.draft is None and plan.fit.draft is None
        assert plan.fill(_config()).draft is None
    unusable = replace(_library_entry(tmp_path / CODER_DRAFT_FILE), problem="shard 2 of 2 missing")
    assert _plan(machine, _config(), [unusable]).draft is None


def test_fill_plans_no_draft_where_the_config_rules_it_out(tmp_path: Path) -> None:
    library = [_library_entry(tmp_path / CODER_DRAFT_FILE)]
    machine = desktop_4090()
    assert _plan(machine, _config(speculative="off"), library).draft is None
    assert _plan(machine, _config(speculative="ngram"), library).draft is None
    named = _plan(machine, _config(draft="/some/draft.gguf"), library)
    assert named.draft is None and named.fill(_config(draft="/some/draft.gguf")).draft == "/some/draft.gguf"
    # MLX drafts with an MLX copy, not a GGUF one; a model with no catalog id has no catalog draft.
    assert _plan(machine, _config(engine="mlx"), library).draft is None
    assert _plan(machine, _config(), library, catalog_id="gpt-oss-20b").draft is None


def test_fill_leaves_the_draft_empty_when_it_does_not_fit(tmp_path: Path) -> None:
    # The 7B at Q4_K_M fills a 16 GB laptop's RAM at 32k; the draft would need more than is left.
    plan = _plan(laptop_cpu(12), _config(), [_library_entry(tmp_path / CODER_DRAFT_FILE)])
    assert plan.fit.fits and plan.fit.verdict == "cpu"
    assert plan.fit.devices[0].free - plan.fit.devices[0].used < 1 * GIB
    assert plan.draft is None and plan.fill(_config()).draft is None


def test_the_draft_is_found_in_a_real_hugging_face_cache_layout(tmp_path: Path) -> None:
    # The library names a pulled file by the catalog id its repo and file name match: no Hub call.
    gguf = tmp_path / "src" / CODER_DRAFT_FILE
    gguf.parent.mkdir()
    write_moe_gguf(gguf)
    cache = tmp_path / "hub"
    make_cached_repo(cache, CODER_DRAFT_REPO, {CODER_DRAFT_FILE: gguf.read_bytes()})
    entries = scan_hf_cache(cache, catalog=default_catalog())
    assert [e.model.catalog_id for e in entries] == ["qwen2.5-coder-0.5b"]
    coder = _model("qwen2.5-coder-7b")
    fit = _plan(desktop_4090(), _config(), None).fit
    pick = local_draft(coder.id, "llamacpp", "gguf", fit, entries)
    assert pick is not None and pick.path == entries[0].model.path and pick.quant == "Q8_0"
    plan = _plan(desktop_4090(), _config(), entries)
    assert plan.fill(_config()).draft == str(entries[0].model.path)


QWEN3_8B_4BIT = 4_612_500_000  # bytes of Qwen3 8B at MLX 4bit, as the advisor estimates it


def _mlx_entry(path: Path, quant: str | None = "8bit", size: int = 650_000_000) -> LibraryEntry:
    # What the library makes of a pulled mlx-community snapshot: its quant read from config.json's bits.
    repo = f"mlx-community/Qwen3-0.6B-{quant or '8bit'}"
    model = LocalModel(path=path, format="mlx", name=repo, quant=quant, catalog_id="qwen3-0.6b")
    return LibraryEntry(model=model, source="hf-cache", size_bytes=size, repo_id=repo)


def _mlx_plan(machine: Machine, library: list[LibraryEntry] | None, **fields: object) -> ServePlan:
    qwen3 = _model("qwen3-8b")
    config = ServeConfig(model=qwen3.id, **fields)  # type: ignore[arg-type]
    return plan_for_config(
        machine, "mlx", qwen3.architecture, QWEN3_8B_4BIT, config, None, catalog_id=qwen3.id, library=library
    )


def test_an_mlx_plan_drafts_with_an_mlx_copy_in_the_library(tmp_path: Path) -> None:
    # A 64 GB M2 serving Qwen3 8B at 32k x 4 sequences has room for the 0.6B's weights and its four KV caches.
    eight, four = tmp_path / "Qwen3-0.6B-8bit", tmp_path / "Qwen3-0.6B-4bit"
    library = [_mlx_entry(four, "4bit", 340_000_000), _mlx_entry(eight)]
    plan = _mlx_plan(macbook_m2(64), library)
    assert (plan.engine, plan.fit.verdict, plan.fit.parallel) == ("mlx", "unified", 4)
    assert plan.draft == str(eight)  # the widest bits that fit
    assert plan.fit.draft is not None and plan.fit.draft.fits
    assert plan.fit.draft.weights == 650_000_000  # the folder on disk, not the catalog's estimate
    assert plan.fit.draft.kv_cache == kv_cache_bytes(_model("qwen3-0.6b").architecture, plan.fit.context, 4)
    assert "draft model Qwen3 0.6B 8bit" in plan.reason
    assert plan.fit.breakdown().splitlines()[-1].startswith("draft Qwen3 0.6B 8bit on Apple M2 unified memory")
    assert plan.fill(ServeConfig(model="qwen3-8b")).draft == str(eight)
    # A copy whose config.json named no bits is known by its repo.
    fit = replace(plan.fit, draft=None)
    pick = local_draft("qwen3-8b", "mlx", "mlx", fit, [_mlx_entry(eight, quant=None)])
    assert pick is not None and (pick.quant, pick.path, pick.source) == ("8bit", eight, str(eight))


def test_each_engine_drafts_only_with_a_copy_in_its_own_format(tmp_path: Path) -> None:
    mlx_copy = _mlx_entry(tmp_path / "Qwen3-0.6B-8bit")
    gguf_copy = _library_entry(tmp_path / "Qwen3-0.6B-Q8_0.gguf", catalog_id="qwen3-0.6b")
    assert _mlx_plan(macbook_m2(64), [gguf_copy]).draft is None
    fit = replace(_mlx_plan(macbook_m2(64), None).fit, draft=None)
    assert local_draft("qwen3-8b", "llamacpp", "gguf", fit, [mlx_copy]) is None
    assert local_draft("qwen3-8b", "mlx", "mlx", fit, [mlx_copy, gguf_copy]) is not None
    assert local_draft("qwen3-8b", "mlx", "mlx", fit, [replace(mlx_copy, problem="no safetensors")]) is None


def test_an_mlx_plan_without_room_or_for_a_sliding_window_model_has_no_draft(tmp_path: Path) -> None:
    library = [_mlx_entry(tmp_path / "Qwen3-0.6B-8bit")]
    # A 24 GB M2 at 16k x 4: the draft's four KV caches alone need more than the 1.5 GiB left.
    tight = _mlx_plan(macbook_m2(24), library)
    assert tight.fit.fits and tight.draft is None and tight.fit.draft is None
    # One sequence at 32k leaves room.
    assert _mlx_plan(macbook_m2(24), library, parallel=1).draft == str(tmp_path / "Qwen3-0.6B-8bit")
    # Gemma 3's sliding-window layers: MLX's rotating caches cannot take back rejected draft tokens.
    gemma, gemma_draft = _model("gemma-3-12b"), _model("gemma-3-1b")
    gemma_copy = LibraryEntry(
        model=LocalModel(path=tmp_path / "g", format="mlx", name="g", quant="8bit", catalog_id=gemma_draft.id),
        source="hf-cache",
        size_bytes=1_100_000_000,
    )
    config = ServeConfig(model=gemma.id)
    plan = plan_for_config(
        macbook_m2(64),
        "mlx",
        gemma.architecture,
        7_000_000_000,
        config,
        None,
        catalog_id=gemma.id,
        library=[gemma_copy],
    )
    assert plan.engine == "mlx" and plan.fit.fits and plan.draft is None


@pytest.mark.parametrize("model_id", ["qwen2.5-coder-7b", "llama-3.1-8b", "qwen3-14b"])
def test_a_big_card_gets_a_draft_for_each_named_pair(model_id: str) -> None:
    machine = desktop_4090(vram_free_gib=23.0)
    model = _model(model_id)
    only_gguf = model.model_copy(update={"exl3": {}, "exl2": {}})  # llama.cpp, as without ExLlama installed
    rec = recommend(machine, only_gguf, calibration=None)
    assert rec.choice.engine == "llamacpp" and rec.choice.fit.verdict == "full_gpu"
    assert rec.draft is not None and rec.draft.model.id == model.draft
