"""The llama.cpp engine: GGUF models on CPU, GPU or both, through llama-cpp-python's low-level API.

We own the model and context directly (not `llama_cpp.Llama`, which runs one request at a time):
one context holds `parallel` sequences in a unified KV cache of `context * parallel` cells, and
a scheduler thread batches them continuously (see `_scheduler`).
"""

from __future__ import annotations

import logging
import os
import re
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from launcher.advisor.fit import KvType, kv_cache_bytes
from launcher.advisor.plan import resolve_kv_type, unplanned_context
from launcher.core.child_process import launcher_command
from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError, EngineError, ModelDoesNotFitError, ModelFormatError, ModelNotFoundError
from launcher.core.model_types import LocalModel
from launcher.core.units import MIB
from launcher.engine_specs import Availability
from launcher.engines.base import ModelInfo
from launcher.engines.llamacpp import _native
from launcher.engines.llamacpp._backend_probe import probe_in_child
from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable
from launcher.engines.llamacpp._draft import DraftModel, check_same_vocabulary
from launcher.engines.llamacpp._embedding import Embedder
from launcher.engines.llamacpp._sliding_window import CheckpointStore
from launcher.engines.llamacpp.gpu_packs import load_installed_pack
from launcher.engines.llamacpp.model import LlamaCppModel, RuntimeSettings
from launcher.engines.llamacpp.spec import SPEC
from launcher.engines.prompt_cache import CacheKey, file_identity, for_model
from launcher.engines.speculation import CATCH_UP_TOKENS
from launcher.hardware.machine import Machine

if TYPE_CHECKING:
    from launcher.catalog.gguf_meta import GgufIdentity

log = logging.getLogger("launcher.engines.llamacpp")

BATCH_TOKENS = 512  # tokens per llama_decode step: bounds how long one step can stall the others
_ALL_LAYERS = 999
_KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml_type ids
_FLASH_ATTN_ENABLED = 1


class LlamaCppEngine:
    """Loads GGUF files with llama.cpp and serves them with continuous batching."""

    name = "llamacpp"

    def availability(self, machine: Machine) -> Availability:
        """Installed? Which backend (CPU, CUDA, Metal...) and CPU features does this build use?"""
        del machine  # llama.cpp runs on every machine the launcher supports; the build decides the backend
        try:
            llama_cpp = _native.llama()
        except EngineError as err:
            return Availability(usable=False, reason=str(err))
        version = _version()
        gpu = bool(llama_cpp.llama_supports_gpu_offload())
        info = _native.system_info(llama_cpp)
        backend = _backend_name(info) if gpu else "cpu"
        features = [f for f in _native.cpu_features(info) if f.startswith(("AVX", "NEON", "AMX", "SVE"))]
        variant = _native.cpu_variant()  # the CPU backend a portable build chose at start: "haswell"
        cpu = f"CPU {variant}" if variant else "CPU"
        head = [cpu] if backend == "cpu" else [backend.upper(), *([cpu] if variant else [])]
        detail = ", ".join([*head, *features[:4]])
        return Availability(
            usable=True, reason=f"llama-cpp-python {version} ({detail})", version=version, backend=backend
        )

    def load(self, model: LocalModel, config: ServeConfig) -> LlamaCppModel:
        """Load the GGUF and start the scheduler; raises ModelError/EngineError with what to change."""
        path = Path(model.path)
        header = _check_gguf_file(path)
        architecture = header.architecture
        llama_cpp = _native.llama()
        # A GPU pack in the data folder (CUDA, Vulkan) joins the backends first; a missing or
        # damaged one is passed over with a warning and the CPU runs the model.
        load_installed_pack(
            _version(), partial(probe_in_child, launcher_argv=launcher_command()), _native.load_backends
        )
        model_pointer = _load_model(llama_cpp, path, header, config)
        try:
            return _build(llama_cpp, model_pointer, model, path, architecture, config)
        except BaseException:
            llama_cpp.llama_model_free(model_pointer)
            raise


def _version() -> str:
    """llama-cpp-python's version, from its metadata (the bindings module the engine loads has none)."""
    return SPEC.installed_version() or "unknown"


def _backend_name(system_info: str) -> str:
    for name in ("CUDA", "Metal", "Vulkan", "HIP", "SYCL"):
        if name.lower() in system_info.lower():
            return name.lower()
    return "gpu"


def _check_gguf_file(path: Path) -> GgufIdentity:
    """The file's architecture, or a clear error for a file that is missing or not a model GGUF: llama.cpp
    answers every bad file with the same NULL pointer."""
    if not path.exists():
        raise ModelNotFoundError(f"Model file not found: {path}. Check the path or pull the model first.")
    if path.is_dir():
        raise ModelFormatError(f"{path} is a directory; the llama.cpp engine needs a .gguf file.")
    # Imported here: `launcher detect` imports this module, and only a load needs the `gguf` package.
    from launcher.catalog.gguf_meta import read_identity

    return read_identity(path)


def _load_model(llama_cpp: ModuleType, path: Path, header: GgufIdentity, config: ServeConfig) -> Any:
    architecture = header.architecture
    params = llama_cpp.llama_model_default_params()
    gpu_layers = config.gpu_layers
    if gpu_layers is None or gpu_layers < 0:
        gpu_layers = _ALL_LAYERS if llama_cpp.llama_supports_gpu_offload() else 0
    params.n_gpu_layers = gpu_layers
    if header.maybe_quantized:  # AMX/repacked buffers only hold quantized weights
        params.use_extra_bufts = extra_buffer_types_usable(path.resolve())
    _native.clear_log_tail()
    pointer = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if pointer:
        return pointer
    lines = _native.log_tail()
    detail = " | ".join(lines[-3:]) or "no details from llama.cpp"
    version = _version()
    if any("unknown model architecture" in line for line in lines):
        raise ModelFormatError(
            f"{path.name}: llama.cpp (llama-cpp-python {version}) does not support the architecture "
            f"'{architecture}'. Upgrade llama-cpp-python or choose a model of a supported family."
        )
    if any("alloc" in line.lower() or "memory" in line.lower() for line in lines):
        raise ModelDoesNotFitError(
            f"{path.name} does not fit in memory ({detail}). "
            "Choose a smaller quantization or offload fewer layers to the GPU."
        )
    raise ModelFormatError(f"llama.cpp could not load {path.name} (architecture '{architecture}'): {detail}")


def _build(
    llama_cpp: ModuleType,
    model_pointer: Any,
    model: LocalModel,
    path: Path,
    architecture: str,
    config: ServeConfig,
) -> LlamaCppModel:
    train_context = int(llama_cpp.llama_model_n_ctx_train(model_pointer))
    context = config.context or unplanned_context(train_context, reserves_cache=True)
    if context > train_context:
        log.warning("context %d is beyond the %d tokens this model was trained on", context, train_context)
    parallel = config.parallel
    n_ctx = context * parallel
    threads = config.threads or _default_threads()
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = min(BATCH_TOKENS, n_ctx)
    params.n_ubatch = min(BATCH_TOKENS, n_ctx)
    params.n_seq_max = parallel
    params.n_threads = threads
    params.n_threads_batch = threads
    params.kv_unified = True  # idle sequences' prefix caches may use any free cell
    # Sliding-window layers keep only the window (llama.cpp's default); prefixes that end before
    # it stay reusable through checkpoints (see _sliding_window). The full-size cache this replaces
    # cost 1.7 GB more RSS for the starter at 32k x 4.
    params.swa_full = False
    params.no_perf = True
    kv_type = resolve_kv_type(config.kv_cache_type)
    params.type_k = params.type_v = _KV_TYPES[kv_type]
    if kv_type != "f16":
        params.flash_attn_type = _FLASH_ATTN_ENABLED  # llama.cpp needs flash attention for a quantized V cache
    _native.clear_log_tail()
    context_pointer = llama_cpp.llama_init_from_model(model_pointer, params)
    context_log = _native.buffer_lines()
    if not context_pointer:
        detail = " | ".join(_native.log_tail()[-2:])
        raise ModelDoesNotFitError(
            f"Not enough memory for a {context}-token context x {parallel} parallel sequences "
            f"({n_ctx} KV cells) with {path.name}: lower --context or --parallel. {detail}".strip()
        )
    try:
        vocab = llama_cpp.llama_model_get_vocab(model_pointer)
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        eog = frozenset(t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t))
        pooling = _meta_int(llama_cpp, model_pointer, f"{architecture}.pooling_type")
        embedder = Embedder(llama_cpp, model_pointer, min(train_context, 8192), threads) if pooling else None
        memory = {
            "weights": int(llama_cpp.llama_model_size(model_pointer)),
            "kv_cache": _allocated_bytes(context_log, "KV") or _planned_kv_bytes(path, context, parallel, kv_type),
            "compute": _allocated_bytes(context_log, "compute"),  # activations of one micro-batch
        }
        swa_window = max(0, int(llama_cpp.llama_model_n_swa(model_pointer)))
        checkpoints = CheckpointStore(
            llama_cpp,
            context_pointer,
            per_slot=config.swa_checkpoints,
            budget_bytes=config.swa_checkpoint_mb * MIB,
        )
        info = _model_info(llama_cpp, model_pointer, model, path, architecture, context, train_context, parallel)
        info = ModelInfo(**{**info.__dict__, "can_embed": embedder is not None, "eos_token_ids": tuple(sorted(eog))})
        settings = RuntimeSettings(
            parallel=parallel,
            context=context,
            n_ctx=n_ctx,
            n_batch=int(params.n_batch),
            max_queue=config.max_queue,
            prefix_cache_tokens=config.prefix_cache_tokens,
            prefill_stall_s=config.prefill_stall_ms / 1000,
            memory=memory,
            swa_window=swa_window,
            speculative=config.speculative,
        )
        draft = _load_draft(llama_cpp, vocab, config, context, parallel, threads)
        if draft is not None:
            memory["draft_model"] = draft.weights_bytes
        key = CacheKey(
            model=model.name,
            engine="llamacpp",
            facts={
                "weights": file_identity(path),
                "engine_version": _version(),
                "kv_type": kv_type,
                "flash_attn": str(int(params.flash_attn_type)),
                "swa_full": str(bool(params.swa_full)),
                "kv_unified": str(bool(params.kv_unified)),
            },
        )
        disk_cache = for_model(key, config.prompt_cache_dir, config.prompt_cache_gb)
        return LlamaCppModel(
            llama_cpp, model_pointer, context_pointer, info, settings, eog, embedder, checkpoints, disk_cache, draft
        )
    except BaseException:
        llama_cpp.llama_free(context_pointer)
        raise


def _load_draft(
    llama_cpp: ModuleType, vocab: Any, config: ServeConfig, context: int, parallel: int, threads: int
) -> DraftModel | None:
    """The `--draft` model in its own context (None without one, or with speculation off)."""
    if config.draft is None or config.speculative in ("off", "ngram"):
        if config.speculative == "draft":
            raise ConfigError("--speculative draft needs a draft model: --draft MODEL")
        return None
    from launcher.catalog.resolve import resolve_model  # a path, catalog id or library name, as for MODEL

    local = resolve_model(config.draft)
    path = Path(local.path)
    header = _check_gguf_file(path)
    model_pointer = _load_model(llama_cpp, path, header, config)
    try:
        check_same_vocabulary(llama_cpp, vocab, llama_cpp.llama_model_get_vocab(model_pointer), path.name)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = context * parallel
        params.n_batch = params.n_ubatch = CATCH_UP_TOKENS + parallel
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True
        params.swa_full = True  # rejected draft tokens can always be dropped (see _draft)
        params.no_perf = True
        context_pointer = llama_cpp.llama_init_from_model(model_pointer, params)
        if not context_pointer:
            raise ModelDoesNotFitError(
                f"Not enough memory for the draft model {path.name} at {context} tokens x {parallel} sequences: "
                "lower --context or --parallel, or serve without --draft."
            )
    except BaseException:
        llama_cpp.llama_model_free(model_pointer)
        raise
    log.info("draft model %s loaded for speculative decoding", path.name)
    return DraftModel(llama_cpp, model_pointer, context_pointer, parallel=parallel, context=context)


def _model_info(
    llama_cpp: ModuleType,
    model_pointer: Any,
    model: LocalModel,
    path: Path,
    architecture: str,
    context: int,
    train_context: int,
    parallel: int,
) -> ModelInfo:
    vocab = llama_cpp.llama_model_get_vocab(model_pointer)
    template = llama_cpp.llama_model_chat_template(model_pointer, None)
    return ModelInfo(
        id=model.name,
        engine="llamacpp",
        engine_version=_version(),
        path=str(path),
        format="gguf",
        architecture=architecture,
        context_length=context,
        train_context_length=train_context,
        vocab_size=int(llama_cpp.llama_vocab_n_tokens(vocab)),
        quant=model.quant,
        chat_template=template.decode("utf-8", errors="replace") if template else None,
        bos_token=_token_text(llama_cpp, vocab, int(llama_cpp.llama_vocab_bos(vocab))),
        eos_token=_token_text(llama_cpp, vocab, int(llama_cpp.llama_vocab_eos(vocab))),
        eos_token_ids=(),
        add_bos_token=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        can_embed=False,
        parallel=parallel,
        extra={
            "description": _describe(llama_cpp, model_pointer),
            "parameters": int(llama_cpp.llama_model_n_params(model_pointer)),
        },
    )


def _token_text(llama_cpp: ModuleType, vocab: Any, token: int) -> str | None:
    if token < 0:
        return None
    raw = llama_cpp.llama_vocab_get_text(vocab, token)
    return raw.decode("utf-8", errors="replace") if raw else None


def _describe(llama_cpp: ModuleType, model_pointer: Any) -> str:
    import ctypes

    buffer = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(model_pointer, buffer, 256)
    return buffer.value.decode("utf-8", errors="replace")


def _meta_int(llama_cpp: ModuleType, model_pointer: Any, key: str) -> int:
    text = _native.meta_string(llama_cpp, model_pointer, key)
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 0


def _allocated_bytes(context_log: list[str], kind: str) -> int:
    """The `kind` buffers llama.cpp allocated ("KV", "compute"), summed over devices (and over the full
    and sliding-window caches), from its context log ("CPU KV buffer size = 24.00 MiB"); 0 without one."""
    pattern = re.compile(rf"\b{kind} buffer size\s*=\s*([0-9.]+)\s*MiB")
    sizes = [float(match.group(1)) for line in context_log if (match := pattern.search(line))]
    return int(sum(sizes) * MIB)


def _planned_kv_bytes(path: Path, context: int, parallel: int, kv_type: KvType) -> int:
    """The advisor's KV cache size for this load, when llama.cpp's log did not say what it allocated
    (0 when the file lacks the numbers)."""
    from launcher.catalog.gguf_meta import read_gguf_metadata  # reads the file again: only when the log was silent

    architecture = read_gguf_metadata(path).to_architecture()
    if architecture is None:
        return 0
    return kv_cache_bytes(architecture, context, parallel, kv_type, sliding=SPEC.sliding_cache)


def _default_threads() -> int:
    try:
        import psutil  # type: ignore[import-untyped]

        physical = psutil.cpu_count(logical=False)
    except ImportError:
        physical = None
    return max(1, physical or os.cpu_count() or 1)
