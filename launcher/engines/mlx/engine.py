"""The MLX engine: MLX-format models (mlx-community layout) through mlx-lm.

A model directory holds config.json (an mlx-lm `quantization` section when quantized),
*.safetensors weights and a Hugging Face tokenizer. mlx-lm builds the network from config.json's
`model_type`; the model's own chat template, BOS/EOS tokens and end-of-turn ids come from the
tokenizer files and generation_config.json. Generation runs on one scheduler thread with
mlx-lm's BatchGenerator (see `_scheduler`).

MLX uses Metal on Apple Silicon. On Linux, `mlx[cpu]` runs the same code on the CPU: slow, but
real, which is how this engine is tested in CI.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from pathlib import Path
from typing import Any

from launcher.advisor.plan import unplanned_context
from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError, EngineUnavailableError, ModelFormatError, ModelNotFoundError
from launcher.core.model_types import LocalModel
from launcher.engine_specs import Availability
from launcher.engines.base import ModelInfo
from launcher.engines.mlx._sampling import GrammarCompiler
from launcher.engines.mlx._scheduler import Loaded, Scheduler
from launcher.engines.mlx._tokens import TokenizerAccess
from launcher.engines.mlx.model import MlxModel
from launcher.engines.mlx.spec import SPEC
from launcher.engines.prompt_cache import CacheKey, file_identity, for_model
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.mlx")

_DTYPE_LABELS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
_DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


class MlxEngine:
    """Loads MLX-format model directories with mlx-lm and serves them with batched generation."""

    name = "mlx"

    def availability(self, machine: Machine) -> Availability:
        """Installed? Metal (Apple Silicon) or the CPU build?"""
        del machine  # the installed build decides: Metal wheels on macOS, `mlx[cpu]` on Linux
        try:
            import mlx.core as mx
            import mlx_lm  # noqa: F401  (the engine needs both packages)
        except ImportError as err:
            return Availability(usable=False, reason=f"not installed ({err.name}): {SPEC.install_hint}")
        version = _version("mlx")
        lm_version = _version("mlx-lm")
        if mx.metal.is_available():
            return Availability(
                usable=True, reason=f"mlx {version}, mlx-lm {lm_version} (Metal)", version=version, backend="metal"
            )
        where = "for testing; MLX is fast on Apple Silicon" if sys.platform != "darwin" else "no Metal GPU found"
        return Availability(
            usable=True,
            reason=f"mlx {version}, mlx-lm {lm_version}: MLX CPU build ({where})",
            version=version,
            backend="cpu",
        )

    def load(self, model: LocalModel, config: ServeConfig) -> MlxModel:
        """Load the model directory and start the scheduler; raises ModelError/EngineError with what to change."""
        path = Path(model.path)
        model_config = check_model_dir(path)
        draft_path = _draft_path(config)
        try:
            # Imported here, not first on the scheduler thread: mlx-lm makes a thread-local stream at
            # import, and one made on a short-lived thread aborts the process at exit.
            import mlx_lm.generate  # noqa: F401
            from mlx_lm.utils import load as mlx_load
        except ImportError as err:
            raise EngineUnavailableError(f"The MLX engine is not installed ({err.name}): {SPEC.install_hint}") from None

        def loader() -> Loaded:
            try:
                loaded_model, tokenizer, loaded_config = mlx_load(str(path), return_config=True)  # type: ignore[misc]
            except ValueError as err:  # "Model type X not supported.", weights that do not match the config
                raise ModelFormatError(
                    f"mlx-lm {_version('mlx-lm')} cannot load {path.name}: {err} "
                    "Upgrade mlx-lm, or choose a model of a supported family."
                ) from None
            except (OSError, KeyError) as err:
                raise ModelFormatError(f"{path} is not a complete MLX model: {err}") from None
            draft = _load_draft(draft_path, tokenizer, loaded_config) if draft_path is not None else None
            return Loaded(model=loaded_model, tokenizer=tokenizer, config=loaded_config, draft=draft)

        train_context = _int(model_config.get("max_position_embeddings")) or 4096
        # MLX allocates KV memory as sequences grow (nothing is reserved up front), so a context no
        # plan chose can be roomy: enough for coding agents, which need 25-32k tokens.
        context = config.context or unplanned_context(train_context, reserves_cache=False)
        if context > train_context:
            log.warning("context %d is beyond the %d tokens this model was trained on", context, train_context)
        quant = _quant_label(model_config) or model.quant
        cache_tokens = (
            config.prefix_cache_tokens if config.prefix_cache_tokens is not None else context * config.parallel
        )
        scheduler = Scheduler(
            loader,
            parallel=config.parallel,
            max_queue=config.max_queue,
            cache_bytes=max(1, cache_tokens * _kv_bytes_per_token(model_config, quant)),
            speculative=config.speculative,
        )
        loaded = scheduler.start()
        disk_cache = None
        try:
            # mlx-lm's TokenizerWrapper keeps the transformers tokenizer as `_tokenizer`; llguidance needs it.
            tokens = TokenizerAccess(getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer))
            info = _model_info(model, path, loaded, tokens, context, train_context, config.parallel, quant)
            n_vocab = max(_int(loaded.config.get("vocab_size")) or 0, len(loaded.tokenizer))
            grammars = GrammarCompiler(tokens.hf, n_vocab, info.eos_token_ids)
            grammars.prepare()
            key = CacheKey(
                model=model.name,
                engine="mlx",
                facts={
                    "weights": file_identity(path),
                    "engine_version": f"mlx {_version('mlx')}, mlx-lm {_version('mlx-lm')}",
                    "quant": quant or "",
                    "kv_layout": scheduler.cache_layout,
                },
            )
            disk_cache = for_model(key, config.prompt_cache_dir, config.prompt_cache_gb)
            return MlxModel(scheduler, info, tokens, grammars, n_vocab, disk_cache)
        except BaseException:
            scheduler.stop()
            if disk_cache is not None:
                disk_cache.close()
            raise


def _draft_path(config: ServeConfig) -> Path | None:
    """The `--draft` model's directory (None without one, or with speculation off)."""
    if config.draft is None or config.speculative in ("off", "ngram"):
        if config.speculative == "draft":
            raise ConfigError("--speculative draft needs a draft model: --draft MODEL")
        return None
    from launcher.catalog.resolve import resolve_model  # a path, catalog id or library name, as for MODEL

    path = Path(resolve_model(config.draft).path)
    try:
        check_model_dir(path)
    except ModelFormatError as err:
        raise ModelFormatError(f"The draft model must be an MLX model, as the served one is. {err}") from None
    return path


def _load_draft(path: Path, main_tokenizer: Any, main_config: dict[str, Any]) -> Any:
    """The draft model, on the scheduler thread (as the served model): an MlxDraftModel."""
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.utils import load as mlx_load

    from launcher.engines.mlx._draft import MlxDraftModel, check_same_vocabulary
    from launcher.engines.mlx._speculative import supported

    try:
        draft_model, draft_tokenizer = mlx_load(str(path))  # type: ignore[misc]
    except (ValueError, OSError, KeyError) as err:
        raise ModelFormatError(f"mlx-lm cannot load the draft model {path.name}: {err}") from None
    # mlx-lm's TokenizerWrapper keeps the transformers tokenizer as `_tokenizer`
    hf = getattr(main_tokenizer, "_tokenizer", main_tokenizer)
    check_same_vocabulary(hf, getattr(draft_tokenizer, "_tokenizer", draft_tokenizer), path.name)
    if not supported(make_prompt_cache(draft_model)):
        raise ModelFormatError(
            f"{path.name} cannot be a draft model: its sliding-window or recurrent layers cannot take back "
            "the draft tokens the served model rejects."
        )
    n_vocab = max(_int(main_config.get("vocab_size")) or 0, len(hf))
    log.info("draft model %s loaded for speculative decoding", path.name)
    return MlxDraftModel(draft_model, n_vocab=n_vocab)


def check_model_dir(path: Path) -> dict[str, Any]:
    """config.json of an MLX model directory; ModelNotFoundError/ModelFormatError say what is wrong."""
    import json

    if not path.exists():
        raise ModelNotFoundError(f"{path} does not exist.")
    if path.is_file():
        hint = " Serve GGUF files with --engine llamacpp." if path.suffix == ".gguf" else ""
        raise ModelFormatError(
            f"{path} is a file; the MLX engine loads a model directory (config.json + *.safetensors).{hint}"
        )
    config_file = path / "config.json"
    if not config_file.is_file() or not any(path.glob("*.safetensors")):
        raise ModelFormatError(
            f"{path} is not an MLX model directory: it needs config.json and *.safetensors weights "
            "(for example an mlx-community repo)."
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{config_file} is not readable JSON: {err}") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelFormatError(f"{config_file} has no model_type, so mlx-lm cannot tell which network to build.")
    quant_method = str((config.get("quantization_config") or {}).get("quant_method", "")).lower()
    if quant_method in ("exl2", "exl3", "gptq", "awq"):
        raise ModelFormatError(
            f"{path.name} is quantized for {quant_method.upper()}, which MLX cannot run. Download the MLX "
            "version of this model (e.g. from mlx-community)."
        )
    return config


def _model_info(
    model: LocalModel,
    path: Path,
    loaded: Loaded,
    tokens: TokenizerAccess,
    context: int,
    train_context: int,
    parallel: int,
    quant: str | None,
) -> ModelInfo:
    wrapper = loaded.tokenizer
    hf = tokens.hf
    template = getattr(hf, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one is the chat template
        template = template.get("default") or next(iter(template.values()), None)
    eos_ids = tuple(sorted(int(t) for t in wrapper.eos_token_ids))
    extra: dict[str, Any] = {
        "backend": "metal" if _metal() else "cpu",
        "mlx_lm_version": _version("mlx-lm"),
    }
    parser = getattr(wrapper, "tool_parser", None)
    if parser is not None:  # mlx-lm's tool-call parser for this family (name and markers)
        extra["tool_parser"] = str(getattr(parser, "__module__", "")).rsplit(".", 1)[-1]
        extra["tool_call_start"] = wrapper.tool_call_start
        extra["tool_call_end"] = wrapper.tool_call_end
    return ModelInfo(
        id=model.name,
        engine="mlx",
        engine_version=_version("mlx"),
        path=str(path),
        format="mlx",
        architecture=str(loaded.config.get("model_type", "unknown")),
        context_length=context,
        train_context_length=train_context,
        vocab_size=len(wrapper),
        quant=quant,
        chat_template=template if isinstance(template, str) else None,
        bos_token=_text(getattr(hf, "bos_token", None)),
        eos_token=_text(getattr(hf, "eos_token", None)),
        eos_token_ids=eos_ids,
        add_bos_token=tokens.adds_bos(),
        can_embed=False,
        parallel=parallel,
        extra=extra,
    )


def _quant_label(config: dict[str, Any]) -> str | None:
    """'4bit' for mlx-lm quantized weights, else the weights' dtype ('bf16', 'f16', 'f32')."""
    quantization = config.get("quantization") or config.get("quantization_config")
    if isinstance(quantization, dict) and quantization.get("bits"):
        return f"{int(quantization['bits'])}bit"
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
    return _DTYPE_LABELS.get(dtype)


def _kv_bytes_per_token(config: dict[str, Any], quant: str | None) -> int:
    """KV cache bytes one token takes (keys + values over all layers), for the prefix-cache budget."""
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**config, **text}
    layers = _int(config.get("num_hidden_layers")) or 32
    heads = _int(config.get("num_attention_heads")) or 32
    kv_heads = _int(config.get("num_key_value_heads")) or heads
    head_dim = _int(config.get("head_dim")) or (_int(config.get("hidden_size")) or 4096) // heads
    element = _DTYPE_BYTES.get(quant or "", 2)  # quantized models compute in 16-bit
    return 2 * layers * kv_heads * head_dim * element


def _metal() -> bool:
    import mlx.core as mx

    return bool(mx.metal.is_available())


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if value else None
