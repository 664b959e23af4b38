"""Loading: the runtime calls and their arguments, cache sizing from the planned context, multi-GPU layout.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). The runtime here is the
CPU stand-in; machines are recorded ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.advisor import plan_local, weights_bytes
from launcher.catalog.catalog import find
from launcher.core.config import ServeConfig
from launcher.core.errors import EngineUnavailableError, ModelDoesNotFitError, ModelFormatError
from launcher.core.model_types import LocalModel
from launcher.engines.exllama_common._hf_files import read_model_files
from launcher.engines.exllama_common._sizing import plan_cache
from launcher.hardware.recorded import load_recorded
from tests.engines.exllama.conftest import LoadFn, environment, v3_engine
from tests.engines.exllama.standin import Behaviour, OutOfMemoryError, Runtime


def test_the_cache_holds_the_planned_context_for_every_job(exl3_dir: Path) -> None:
    # The server's plan decides the context (below); the engine sizes its paged cache from it.
    files = read_model_files(exl3_dir, "exl3")
    machine = load_recorded("rtx4090-desktop")
    four = plan_cache(machine, files, ServeConfig(context=16384, parallel=4), tensor_parallel_capable=True)
    assert (four.context, four.cache_tokens) == (16384, 65536)
    assert not four.tensor_parallel and four.gpu_count == 1
    odd = plan_cache(machine, files, ServeConfig(context=1000, parallel=3), tensor_parallel_capable=True)
    assert odd.cache_tokens == 3072  # 3,000 tokens rounded up to whole 256-token pages


def test_the_plan_for_exl3_fits_the_context_in_vram() -> None:
    # qwen3-8b at 4.0 bpw on a 24 GB card: one job gets 32k; four jobs x 32k would not fit next to
    # the weights, and ExLlama cannot offload, so the plan lowers the context instead.
    arch = find("qwen3-8b").architecture
    machine = load_recorded("rtx4090-desktop")
    weights = weights_bytes(arch, 4.0)
    one = plan_local(machine, "exl3", arch, weights, parallel=1, engine="exllamav3")
    four = plan_local(machine, "exl3", arch, weights, parallel=4, engine="exllamav3")
    assert (one.context, four.context) == (32768, 16384)
    assert four.fit.verdict == "full_gpu" and four.gpu_layers == -1


def test_an_asked_context_that_does_not_fit_is_refused_with_the_breakdown() -> None:
    arch = find("qwen3-8b").architecture
    plan = plan_local(
        load_recorded("rtx4090-desktop"), "exl3", arch, weights_bytes(arch, 4.0),
        context=40960, parallel=16, engine="exllamav3",
    )  # fmt: skip
    assert not plan.fit.fits and plan.fit.verdict == "wont_fit"
    assert "NVIDIA GeForce RTX 4090" in plan.fit.breakdown()


def test_exl3_loads_tensor_parallel_on_two_gpus(load: LoadFn, runtime: Runtime) -> None:
    model = load(machine="2x-rtx3090-nvlink", runtime=runtime)
    assert runtime.log.load_kwargs == [{"tensor_p": True, "use_per_device": None}]
    assert model.info.extra["tensor_parallel"] is True and model.info.extra["gpus"] == 2


def test_exl3_on_one_gpu_uses_the_automatic_split(load: LoadFn, runtime: Runtime) -> None:
    load(runtime=runtime)
    assert runtime.log.load_kwargs == [{"tensor_p": False, "use_per_device": None}]


def test_exl3_cache_is_context_times_parallel_in_whole_pages(load: LoadFn, runtime: Runtime) -> None:
    model = load(runtime=runtime, context=1000, parallel=3)
    assert runtime.log.cache_tokens == [3072]  # 3000 rounded up to 256-token pages
    assert runtime.log.generator_kwargs[0]["max_batch_size"] == 3
    assert (model.info.context_length, model.info.parallel) == (1000, 3)
    assert model.stats().kv_cache_total_tokens == 3072


def test_without_a_context_the_tiny_model_gets_its_trained_context(load: LoadFn, runtime: Runtime) -> None:
    model = load(runtime=runtime, parallel=2)
    assert model.info.context_length == 4096 == model.info.train_context_length
    assert runtime.log.cache_tokens == [8192]


@pytest.mark.parametrize(("kv", "bits"), [("q8_0", 8), ("q4_0", 4)])
def test_a_quantized_kv_cache_uses_the_quant_cache_layer(load: LoadFn, runtime: Runtime, kv: str, bits: int) -> None:
    load(runtime=runtime, kv_cache_type=kv)
    kwargs = runtime.log.cache_kwargs[0]
    assert kwargs["layer_type"] is runtime.exllamav3.CacheLayer_quant
    assert (kwargs["k_bits"], kwargs["v_bits"]) == (bits, bits)


def test_model_info_comes_from_the_hf_files(load: LoadFn) -> None:
    model = load()
    info = model.info
    assert (info.engine, info.format, info.architecture, info.quant) == (
        "exllamav3",
        "exl3",
        "LlamaForCausalLM",
        "4.0bpw",
    )
    assert info.chat_template is not None and "<tool_call>" in info.chat_template
    assert (info.eos_token, info.bos_token, info.add_bos_token) == ("<|im_end|>", None, False)
    assert info.engine_version == "0.0.6-standin" and info.vocab_size == 512 and not info.can_embed


def test_exl2_without_flash_attn_runs_unpaged_one_job_at_a_time(load: LoadFn, runtime: Runtime) -> None:
    runtime.v2_attn.has_flash_attn_with_paged = False
    model = load("exl2", runtime=runtime, env=environment(flash_attn=None), context=1000, parallel=4)
    assert model.info.parallel == 1
    assert runtime.log.generator_kwargs[0]["paged"] is False
    assert runtime.log.generator_kwargs[0]["max_batch_size"] == 1
    assert runtime.log.cache_tokens == [1000]  # unpaged: one sequence of exactly the context


def test_exl2_with_flash_attn_pages_the_cache_and_batches(load: LoadFn, runtime: Runtime) -> None:
    model = load("exl2", runtime=runtime, context=1000, parallel=4, kv_cache_type="q4_0")
    assert model.info.parallel == 4
    assert runtime.log.generator_kwargs[0] == {"max_batch_size": 4, "paged": True, "max_seq_len": 1000}
    assert runtime.log.cache_tokens == [4096]
    assert runtime.log.cache_kwargs == [{"kind": "ExLlamaV2Cache_Q4", "lazy": True}]
    assert runtime.log.load_kwargs == [{"autosplit": True, "max_seq_len": 1000}]


def test_the_wrong_engine_for_the_folder_says_which_one_to_use(exl2_dir: Path, runtime: Runtime) -> None:
    engine = v3_engine(runtime, load_recorded("rtx4090-desktop"))
    with pytest.raises(ModelFormatError, match=r"is EXL2, not EXL3\. Serve it with --engine exllamav2"):
        engine.load(LocalModel(path=exl2_dir, format="exl2", name="x"), ServeConfig())


def test_a_gguf_file_is_not_an_exl3_folder(tmp_path: Path, runtime: Runtime) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ModelFormatError, match="is not a folder"):
        v3_engine(runtime, load_recorded("rtx4090-desktop")).load(LocalModel(gguf, "exl3", "m"), ServeConfig())


def test_loading_where_the_engine_cannot_run_says_why(exl3_dir: Path, runtime: Runtime) -> None:
    engine = v3_engine(runtime, load_recorded("rtx2080ti"))
    with pytest.raises(EngineUnavailableError, match=r"compute capability 7\.5 < 8\.0"):
        engine.load(LocalModel(exl3_dir, "exl3", "m"), ServeConfig())
    assert runtime.log.cache_tokens == []  # nothing was built


def test_out_of_memory_while_loading_is_a_does_not_fit_error(exl3_dir: Path) -> None:
    runtime = Runtime(Behaviour(fail_load=OutOfMemoryError("CUDA out of memory")))
    engine = v3_engine(runtime, load_recorded("rtx4090-desktop"))
    with pytest.raises(ModelDoesNotFitError, match="ran out of GPU memory"):
        engine.load(LocalModel(exl3_dir, "exl3", "m"), ServeConfig())
    assert runtime.log.unloaded == 1
