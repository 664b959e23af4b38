"""Draft models in the catalog: the shipped pairs share a tokenizer with a smaller sibling, and a draft
that could not draft (unknown id, another family, not smaller, another vocabulary) is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.catalog.catalog import load_catalog
from launcher.catalog.schema import DRAFT_VOCAB_TOLERANCE, Catalog
from launcher.core.errors import CatalogError
from tests.catalog.test_catalog_data import STARTER_ENTRY

# The pairs the catalog promises: llama.cpp's speculative check accepts each (same tokenizer).
PAIRS = {
    "qwen2.5-coder-7b": "qwen2.5-coder-0.5b",
    "qwen2.5-coder-32b": "qwen2.5-coder-0.5b",
    "llama-3.1-8b": "llama-3.2-1b",
    "llama-3.3-70b": "llama-3.2-1b",
    "qwen3-8b": "qwen3-0.6b",
    "qwen3-14b": "qwen3-0.6b",
    "qwen3-32b": "qwen3-0.6b",
}


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return load_catalog()


@pytest.mark.parametrize(("model_id", "draft_id"), sorted(PAIRS.items()))
def test_shipped_pairs_name_their_draft(shipped: Catalog, model_id: str, draft_id: str) -> None:
    model = shipped.get(model_id)
    assert model is not None and model.draft == draft_id
    draft = shipped.draft_for(model_id)
    assert draft is not None and draft.id == draft_id


def test_every_shipped_draft_is_a_smaller_sibling_with_the_same_vocabulary(shipped: Catalog) -> None:
    pairs = [(m, shipped.draft_for(m.id)) for m in shipped.models if m.draft]
    assert len(pairs) >= len(PAIRS)
    for model, draft in pairs:
        assert draft is not None, f"{model.id}: draft {model.draft!r} is not in the catalog"
        assert draft.family == model.family, model.id
        assert draft.architecture.params_total_b * 4 < model.architecture.params_total_b, model.id
        assert model.architecture.vocab_size is not None and draft.architecture.vocab_size is not None
        assert abs(model.architecture.vocab_size - draft.architecture.vocab_size) <= DRAFT_VOCAB_TOLERANCE
        assert draft.gguf is not None and "Q8_0" in draft.gguf.quants, f"{draft.id}: a draft runs best at Q8_0"
        assert not draft.draft, f"{draft.id} drafts for others and needs no draft itself"
        assert draft.architecture.max_context >= min(model.architecture.max_context, 32768), model.id


def test_models_without_a_small_sibling_name_no_draft(shipped: Catalog) -> None:
    # gpt-oss, Phi-4 and Mistral have no published small model with their vocabulary; MoE models read
    # few parameters per token already.
    for model_id in ("gpt-oss-20b", "gpt-oss-120b", "phi-4", "mistral-small-3.2-24b", "qwen3-30b-a3b"):
        assert shipped.draft_for(model_id) is None, model_id
    assert shipped.draft_for("no-such-model") is None


def test_new_draft_entries_point_at_the_publishers_gguf_repos(shipped: Catalog) -> None:
    coder = shipped.get("qwen2.5-coder-0.5b")
    llama = shipped.get("llama-3.2-1b")
    assert coder is not None and coder.gguf is not None
    assert coder.gguf.repo == "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    assert coder.gguf.quants["Q8_0"].files == ["Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf"]
    assert (coder.architecture.vocab_size, coder.architecture.layers, coder.architecture.kv_heads) == (151936, 24, 2)
    assert llama is not None and llama.gguf is not None and llama.upstream_gated
    assert llama.gguf.repo == "bartowski/Llama-3.2-1B-Instruct-GGUF"
    assert llama.gguf.quants["Q8_0"].files == ["Llama-3.2-1B-Instruct-Q8_0.gguf"]
    assert (llama.architecture.vocab_size, llama.architecture.layers, llama.architecture.head_dim) == (128256, 16, 64)


# ------------------------------------------------------------------ bad drafts are refused ----


def _entry(
    model_id: str, *, family: str = "qwen3", params: float = 8.0, vocab: int | None = 151936, **extra: str
) -> str:
    vocab_field = f", vocab_size = {vocab}" if vocab else ""
    lines = [
        "\n[[model]]",
        f'id = "{model_id}"',
        f'name = "{model_id}"',
        f'family = "{family}"',
        'description = "test"',
        'license = "mit"',
        'upstream_repo = "someone/Tiny"',
        *(f'{key} = "{value}"' for key, value in extra.items()),
        f"architecture = {{ params_total_b = {params}, params_active_b = {params}, layers = 32, attention_heads = 32, "
        f"kv_heads = 8, head_dim = 128, hidden_size = 4096, max_context = 40960{vocab_field} }}",
        "[model.gguf]",
        'repo = "someone/Tiny-GGUF"',
        f'quants = {{ Q8_0 = {{ files = ["{model_id}-Q8_0.gguf"] }} }}',
    ]
    return "\n".join(lines) + "\n"


def _load(tmp_path: Path, *entries: str) -> Catalog:
    path = tmp_path / "models.toml"
    path.write_text(STARTER_ENTRY + "".join(entries), encoding="utf-8")
    return load_catalog(path)


def test_a_valid_pair_loads(tmp_path: Path) -> None:
    loaded = _load(tmp_path, _entry("big", draft="small"), _entry("small", params=0.6))
    draft = loaded.draft_for("big")
    assert draft is not None and draft.id == "small"
    assert loaded.draft_for("small") is None


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((_entry("big", draft="missing"),), "'missing' is not a catalog id"),
        ((_entry("big", draft="big"),), "is the model itself"),
        ((_entry("big", draft="small"), _entry("small", family="llama3", params=1.0)), "same tokenizer"),
        ((_entry("big", draft="small"), _entry("small", params=8.0)), "is not smaller"),
        ((_entry("big", draft="small"), _entry("small", params=0.6, vocab=128256)), "not the same tokenizer"),
        ((_entry("big", draft="small"), _entry("small", params=0.6, vocab=None)), "must record vocab_size"),
    ],
)
def test_a_draft_that_cannot_draft_is_refused(tmp_path: Path, entries: tuple[str, ...], message: str) -> None:
    with pytest.raises(CatalogError, match=message) as caught:
        _load(tmp_path, *entries)
    assert "model 'big': draft" in str(caught.value)


def test_a_vocabulary_padded_within_llama_cpps_tolerance_is_the_same_tokenizer(tmp_path: Path) -> None:
    # Qwen2.5 7B+ pad 151,936 tokens to 152,064 in config.json; llama.cpp accepts up to 128 more.
    loaded = _load(tmp_path, _entry("big", vocab=152064, draft="small"), _entry("small", params=0.5, vocab=151936))
    assert loaded.draft_for("big") is not None
    with pytest.raises(CatalogError, match="not the same tokenizer"):
        _load(tmp_path, _entry("big", vocab=152065, draft="small"), _entry("small", params=0.5, vocab=151936))
