"""The shipped catalog validates, is internally consistent, and bad catalog data is refused clearly.

These tests read the real launcher/resources/catalog/models.toml: a wrong number there would give users a
wrong "will it fit" answer, which is the complaint the launcher exists to fix.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from launcher.advisor.tables import known_quants
from launcher.catalog import catalog as catalog_module
from launcher.catalog.catalog import catalog_file, find, load_catalog
from launcher.catalog.schema import SPLIT_SHARD, Catalog, CatalogModel, is_gguf_quant_name
from launcher.core.errors import CatalogError

GIB = 1024**3

# Bits per weight of the quant types the catalog uses, as llama.cpp reports them for typical models
# (Q4_K_M mixes Q4_K and Q6_K blocks, hence ~4.8). Used only for order-of-magnitude checks here.
NOMINAL_BITS_PER_WEIGHT = {
    "Q4_K_M": 4.8,
    "Q5_K_M": 5.7,
    "Q6_K": 6.6,
    "Q8_0": 8.5,
    "F16": 16.0,
    "BF16": 16.0,
    "MXFP4": 4.25,
}

# Families whose interleaving of sliding-window and full layers is fixed by the architecture.
FULL_LAYER_RULES = {
    "gemma3": lambda layers: layers // 6,  # 5 local : 1 global
    "gpt-oss": lambda layers: layers // 2,  # alternating sliding / full
}

STARTER_ENTRY = """
[[model]]
id = "gemma-3-270m"
name = "Gemma 3 270M"
family = "gemma3"
description = "starter"
license = "gemma"
upstream_repo = "google/gemma-3-270m-it"
starter = true
[model.architecture]
params_total_b = 0.268
params_active_b = 0.268
layers = 18
attention_heads = 4
kv_heads = 1
head_dim = 256
hidden_size = 640
max_context = 32768
sliding_window = 512
full_attention_layers = 3
[model.gguf]
repo = "unsloth/gemma-3-270m-it-GGUF"
quants = { Q4_K_M = { files = ["gemma-3-270m-it-Q4_K_M.gguf"] } }
"""


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return load_catalog()


def entry(shipped: Catalog, model_id: str) -> CatalogModel:
    found = shipped.get(model_id)
    assert found is not None, f"{model_id} missing from the catalog"
    return found


def write_catalog(tmp_path: Path, *extra_entries: str, starter: str = STARTER_ENTRY) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(starter + "".join(textwrap.dedent(e) for e in extra_entries), encoding="utf-8")
    return path


def gguf_block(quants: str, repo: str = "someone/Tiny-GGUF") -> str:
    return f'[model.gguf]\nrepo = "{repo}"\nquants = {{ {quants} }}\n'


def dense_entry(model_id: str = "tiny-test", *, arch: str | None = None, formats: str | None = None) -> str:
    arch = arch or (
        "params_total_b = 8.0, params_active_b = 8.0, layers = 32, attention_heads = 32, kv_heads = 8, "
        "head_dim = 128, hidden_size = 4096, max_context = 131072"
    )
    if formats is None:
        formats = gguf_block('Q4_K_M = { files = ["Tiny-Q4_K_M.gguf"] }')
    return (
        f'\n[[model]]\nid = "{model_id}"\nname = "Tiny"\nfamily = "llama3"\ndescription = "test"\n'
        f'license = "mit"\nupstream_repo = "someone/Tiny"\narchitecture = {{ {arch} }}\n{formats}'
    )


# ------------------------------------------------------------------ the shipped catalog ----


def test_shipped_catalog_loads_with_starter_and_at_least_twelve_more_models(shipped: Catalog) -> None:
    assert shipped.starter.id == "gemma-3-270m"
    assert shipped.starter.gguf is not None and "Q4_K_M" in shipped.starter.gguf.quants
    others = [m for m in shipped.models if not m.starter]
    assert len(others) >= 12
    ids = [m.id for m in shipped.models]
    assert len(ids) == len(set(ids))


def test_find_returns_entries_and_suggests_close_ids() -> None:
    assert find("qwen3-coder-30b-a3b").architecture.is_moe
    with pytest.raises(CatalogError, match=r"Did you mean: .*qwen3-8b"):
        find("qwen3")
    with pytest.raises(CatalogError, match="launcher models --catalog"):
        find("no-such-model-anywhere")


def test_catalog_spans_small_to_large_dense_and_moe_with_coding_models(shipped: Catalog) -> None:
    moe = [m for m in shipped.models if m.architecture.is_moe]
    coding = [m for m in shipped.models if "coding" in m.tags]
    assert len(moe) >= 2
    assert len(coding) >= 2
    sizes = sorted(m.architecture.params_total_b for m in shipped.models)
    assert sizes[0] < 1 and sizes[-1] > 60, "catalog should cover tiny to very large models"
    families = {m.family for m in shipped.models}
    assert {"qwen3", "gemma3", "llama3", "mistral", "gpt-oss", "phi4"} <= families


def test_coding_models_support_tool_calls(shipped: Catalog) -> None:
    # Coding agents drive the model through tool calls; a coding entry without them is useless there.
    for model in shipped.models:
        if "coding" in model.tags:
            assert "tools" in model.tags, model.id


def test_every_entry_has_gguf_so_llama_cpp_can_always_run_it(shipped: Catalog) -> None:
    for model in shipped.models:
        assert model.formats(), model.id
        assert model.gguf is not None, f"{model.id}: GGUF is the fallback format and must be listed"


def test_gguf_quant_names_are_llama_cpp_types_the_advisor_can_size(shipped: Catalog) -> None:
    for model in shipped.models:
        assert model.gguf is not None
        for quant in model.gguf.quants:
            assert is_gguf_quant_name(quant), f"{model.id}: {quant}"
            assert quant in NOMINAL_BITS_PER_WEIGHT, f"{model.id}: no size estimate for {quant}"


def test_split_gguf_shards_are_complete_and_consistent(shipped: Catalog) -> None:
    splits = 0
    for model in shipped.models:
        assert model.gguf is not None
        for quant_name, quant in model.gguf.quants.items():
            if not quant.is_split:
                assert not SPLIT_SHARD.match(quant.files[0].rsplit("/", 1)[-1])
                continue
            splits += 1
            folders = {f.rpartition("/")[0] for f in quant.files}
            assert len(folders) == 1, f"{model.id} {quant_name}: shards in different folders"
            for index, name in enumerate(quant.files, start=1):
                match = SPLIT_SHARD.match(name.rsplit("/", 1)[-1])
                assert match, name
                assert (int(match["index"]), int(match["count"])) == (index, len(quant.files))
                assert quant_name.lower() in name.lower()
            assert quant.first_file == quant.files[0]
    assert splits >= 3, "the big models (70B, 120B) ship split GGUFs"


def test_mlx_and_exl_variant_keys_and_revisions(shipped: Catalog) -> None:
    for model in shipped.models:
        for key, mlx in model.mlx.items():
            assert re.fullmatch(r"\d+bit", key), f"{model.id}: {key}"
            assert mlx.repo.split("/")[1], model.id
        for key, exl in {**model.exl2, **model.exl3}.items():
            assert re.fullmatch(r"\d+\.\d{1,2}bpw", key), f"{model.id}: {key}"
            # turboderp-style repos keep each bit width on its own branch, named like the key.
            assert exl.revision == key, f"{model.id}: {key} -> {exl.revision}"
    assert any(m.exl3 for m in shipped.models) and any(m.exl2 for m in shipped.models)


def test_attention_geometry_is_plausible(shipped: Catalog) -> None:
    for model in shipped.models:
        arch = model.architecture
        assert arch.attention_heads % arch.kv_heads == 0, model.id
        # Qwen3, Gemma 3, gpt-oss and Mistral Small decouple head_dim from hidden/heads, but never by 2x+.
        ratio = arch.head_dim * arch.attention_heads / arch.hidden_size
        assert 0.5 <= ratio <= 2.0, f"{model.id}: head_dim*heads/hidden = {ratio:.2f}"
        assert arch.head_dim in {64, 128, 256}, model.id
        assert arch.max_context >= 16384, model.id


def test_sliding_window_layer_counts_follow_each_family_pattern(shipped: Catalog) -> None:
    for model in shipped.models:
        arch = model.architecture
        rule = FULL_LAYER_RULES.get(model.family)
        if rule is None:
            assert arch.sliding_window is None, f"{model.id}: unexpected sliding window"
            continue
        assert arch.sliding_window is not None, model.id
        assert arch.full_attention_layers == rule(arch.layers), model.id


def test_moe_entries_declare_experts_and_read_fewer_params_than_they_store(shipped: Catalog) -> None:
    for model in shipped.models:
        arch = model.architecture
        if arch.is_moe:
            assert arch.experts is not None and arch.experts_active is not None
            assert arch.experts_active < arch.experts
            assert arch.params_active_b < arch.params_total_b / 3, model.id
            assert "moe" in model.tags, model.id
        else:
            assert arch.params_active_b == arch.params_total_b, model.id


def test_params_are_consistent_with_the_layer_shapes(shipped: Catalog) -> None:
    # Attention projections alone (q, k, v, o per layer) are a hard lower bound on the parameter count;
    # a unit slip (8.2 typed as 0.82) or a wrong layer count shows up here.
    for model in shipped.models:
        arch = model.architecture
        q_and_o = 2 * arch.hidden_size * arch.attention_heads * arch.head_dim
        k_and_v = 2 * arch.hidden_size * arch.kv_heads * arch.head_dim
        attention_b = arch.layers * (q_and_o + k_and_v) / 1e9
        assert attention_b < arch.params_active_b, model.id
        # Per token a transformer reads attention + MLP (+ embeddings): never 40x the attention alone.
        assert arch.params_active_b < 40 * attention_b, model.id


def test_quantized_weight_sizes_are_sane(shipped: Catalog) -> None:
    def q4_bytes(model_id: str) -> float:
        arch = entry(shipped, model_id).architecture
        return arch.params_total_b * 1e9 * NOMINAL_BITS_PER_WEIGHT["Q4_K_M"] / 8

    assert q4_bytes("llama-3.3-70b") > 30 * GIB
    assert q4_bytes("gpt-oss-120b") > 55 * GIB
    assert q4_bytes("qwen3-30b-a3b") > 15 * GIB  # all experts must be in memory
    assert q4_bytes("gemma-3-270m") < 0.5 * GIB
    recorded = 0
    for model in shipped.models:
        assert model.gguf is not None
        sizes = [
            (NOMINAL_BITS_PER_WEIGHT[name], quant.size_bytes)
            for name, quant in model.gguf.quants.items()
            if quant.size_bytes is not None
        ]
        recorded += len(sizes)
        params = model.architecture.params_total_b * 1e9
        for nominal, size in sizes:
            bits = size * 8 / params
            # Physically possible: never below ~4 bits (gpt-oss keeps experts in MXFP4 even in "F16" files,
            # so recorded sizes may undercut the name), never far above the quant's nominal width.
            assert 3.5 < bits < 2.5 * nominal, f"{model.id}: {bits:.1f} bits/weight"
        # A wider quant of the same model is never a smaller file.
        by_width = [size for _, size in sorted(sizes)]
        assert by_width == sorted(by_width), model.id
    assert recorded >= 5


def test_advisor_has_a_bits_per_weight_figure_for_every_catalog_quant(shipped: Catalog) -> None:
    # The advisor sizes unrecorded quants from params x its table; a quant missing there would be guessed.
    listed = {fmt: {q.upper() for q in known_quants(fmt)} for fmt in ("gguf", "mlx", "exl2", "exl3")}
    for model in shipped.models:
        for fmt in model.formats():
            for quant in model.quants(fmt):
                assert quant.upper() in listed[fmt], (
                    f"{model.id}: {fmt} {quant} not in launcher/resources/advisor/quants.csv"
                )


def test_gated_upstreams_are_marked_and_listed_files_are_community_quants(shipped: Catalog) -> None:
    for model in shipped.models:
        owner = model.upstream_repo.split("/")[0]
        if owner in {"meta-llama", "google"}:
            assert model.upstream_gated, f"{model.id}: {model.upstream_repo} is gated on the Hub"
        assert not model.gated, f"{model.id}: the catalog should point at ungated quant repos"


def test_every_entry_documents_where_its_numbers_come_from() -> None:
    text = catalog_file().read_text(encoding="utf-8")
    blocks = re.split(r"^\[\[model\]\]$", text, flags=re.MULTILINE)[1:]
    assert blocks
    for block in blocks:
        model_id = re.search(r'^id = "([^"]+)"', block, re.MULTILINE)
        assert model_id, block[:80]
        assert "# source:" in block, f"{model_id[1]} has no '# source:' comment"


# ------------------------------------------------------------------ bad data is refused ----


def test_valid_minimal_catalog_loads(tmp_path: Path) -> None:
    loaded = load_catalog(write_catalog(tmp_path, dense_entry()))
    assert [m.id for m in loaded.models] == ["gemma-3-270m", "tiny-test"]


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        (
            "params_total_b = 3.0, params_active_b = 8.0, layers = 32, attention_heads = 32, kv_heads = 8, "
            "head_dim = 128, hidden_size = 4096, max_context = 8192",
            "params_active_b \\(8.0\\) cannot exceed params_total_b \\(3.0\\)",
        ),
        (
            "params_total_b = 8.0, params_active_b = 8.0, layers = 32, attention_heads = 32, kv_heads = 6, "
            "head_dim = 128, hidden_size = 4096, max_context = 8192",
            "attention_heads \\(32\\) must be a multiple of kv_heads \\(6\\)",
        ),
        (
            "params_total_b = 30.0, params_active_b = 3.0, layers = 48, attention_heads = 32, kv_heads = 4, "
            "head_dim = 128, hidden_size = 2048, max_context = 8192, experts = 128",
            "experts and experts_active go together",
        ),
        (
            "params_total_b = 30.0, params_active_b = 3.0, layers = 48, attention_heads = 32, kv_heads = 4, "
            "head_dim = 128, hidden_size = 2048, max_context = 8192, experts = 8, experts_active = 9",
            "experts_active \\(9\\) cannot exceed experts \\(8\\)",
        ),
        (
            "params_total_b = 8.0, params_active_b = 8.0, layers = 32, attention_heads = 32, kv_heads = 8, "
            "head_dim = 128, hidden_size = 4096, max_context = 8192, full_attention_layers = 4",
            "full_attention_layers needs sliding_window",
        ),
    ],
)
def test_inconsistent_architecture_is_rejected(tmp_path: Path, arch: str, message: str) -> None:
    path = write_catalog(tmp_path, dense_entry("broken-model", arch=arch))
    with pytest.raises(CatalogError, match=message) as caught:
        load_catalog(path)
    assert "model 'broken-model': architecture" in str(caught.value)
    assert str(path) in str(caught.value)


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    path = write_catalog(tmp_path, dense_entry("twin"), dense_entry("twin"))
    with pytest.raises(CatalogError, match=r"duplicate catalog ids: \['twin'\]"):
        load_catalog(path)


def test_missing_or_second_starter_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="exactly one catalog entry must be the starter"):
        load_catalog(write_catalog(tmp_path, dense_entry(), starter=""))
    second = STARTER_ENTRY.replace('id = "gemma-3-270m"', 'id = "other-starter"')
    with pytest.raises(CatalogError, match="exactly one catalog entry must be the starter"):
        load_catalog(write_catalog(tmp_path, second))


@pytest.mark.parametrize(
    ("formats", "message"),
    [
        ("", "lists no weights"),
        (gguf_block('Q4_K_XL = { files = ["Tiny-Q4_K_XL.gguf"] }'), "unknown llama.cpp quant type"),
        (gguf_block('Q4_K_M = { files = ["Tiny-Q8_0.gguf"] }'), "do not carry its name"),
        (
            gguf_block('Q8_0 = { files = ["Q8_0/T-Q8_0-00001-of-00003.gguf", "Q8_0/T-Q8_0-00002-of-00003.gguf"] }'),
            "must be listed 1..2 of 2",
        ),
        (
            gguf_block('Q8_0 = { files = ["T-Q8_0-00002-of-00002.gguf", "T-Q8_0-00001-of-00002.gguf"] }'),
            "in order",
        ),
        (
            gguf_block('Q8_0 = { files = ["T-Q8_0-00001-of-00002.gguf", "U-Q8_0-00002-of-00002.gguf"] }'),
            "belong to different files",
        ),
        (
            gguf_block('Q8_0 = { files = ["T-Q8_0-00001-of-00002.gguf", "T-Q8_0.gguf"] }'),
            "mixes shard and non-shard",
        ),
        (gguf_block('Q8_0 = { files = ["T-Q8_0.gguf"] }', repo="not a repo"), "not a Hugging Face repo id"),
        (
            '[model.mlx]\n"4-bit" = { repo = "mlx-community/Tiny-4bit" }\n',
            "MLX variant keys must look like '4bit'",
        ),
        (
            '[model.exl3]\n"4_0" = { repo = "turboderp/Tiny-exl3", revision = "4_0" }\n',
            "EXL variant keys must look like '4.0bpw'",
        ),
    ],
)
def test_bad_weight_locations_are_rejected(tmp_path: Path, formats: str, message: str) -> None:
    path = write_catalog(tmp_path, dense_entry("bad-weights", formats=formats))
    with pytest.raises(CatalogError, match=message) as caught:
        load_catalog(path)
    assert "model 'bad-weights'" in str(caught.value)


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    entry_text = dense_entry("typo").replace('license = "mit"', 'licence = "mit"')
    with pytest.raises(CatalogError, match="model 'typo': licen"):
        load_catalog(write_catalog(tmp_path, entry_text))


def test_unreadable_or_malformed_files_give_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="Cannot read catalog"):
        load_catalog(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[model]\nid = ", encoding="utf-8")
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_catalog(broken)


def test_default_catalog_is_the_shipped_file() -> None:
    catalog_module.default_catalog.cache_clear()
    assert catalog_module.default_catalog() is catalog_module.default_catalog()
    assert catalog_file().parts[-3:] == ("resources", "catalog", "models.toml")
