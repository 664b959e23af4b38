"""The exllamav2 part of the stand-in: upstream's names and keyword arguments (see standin.py).

Signatures follow exllamav2's config.py, model.py (load_autosplit), cache.py, tokenizer/tokenizer.py,
generator/dynamic.py, generator/sampler.py and generator/filters/base.py.
THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tests.engines.exllama.standin_core import PAGE_SIZE, FakeTensor, StandinGenerator, StandinTokenizer, _JobState

if TYPE_CHECKING:
    from tests.engines.exllama.standin import Runtime


def make_v2(runtime: Runtime) -> tuple[SimpleNamespace, SimpleNamespace, SimpleNamespace, SimpleNamespace]:
    class ExLlamaV2Config:
        def __init__(self, model_dir: str | None = None) -> None:
            self.model_dir = model_dir
            data = json.loads((Path(str(model_dir)) / "config.json").read_text())
            self.max_seq_len = int(data.get("max_position_embeddings", 4096))
            self.vocab_size = int(data["vocab_size"])
            self.max_batch_size, self.max_input_len = 1, 2048
            self.compat_overrides = False

        def arch_compat_overrides(self, quiet: bool = False, warn_only: bool = False) -> None:
            self.compat_overrides = True

    class ExLlamaV2:
        def __init__(self, config: ExLlamaV2Config, lazy_load: bool = False) -> None:
            self.config = config

        def load_autosplit(
            self,
            cache: Any,
            reserve_vram: Any = None,
            last_id_only: bool = False,
            callback: Any = None,
            callback_gen: Any = None,
            progress: bool = False,
        ) -> None:
            runtime.log.load_kwargs.append({"autosplit": True, "max_seq_len": self.config.max_seq_len})
            if runtime.behaviour.fail_load is not None:
                raise runtime.behaviour.fail_load

        def unload(self) -> None:
            runtime.log.unloaded += 1

    def cache_class(kind: str) -> type:
        class Cache:
            def __init__(
                self,
                model: ExLlamaV2,
                batch_size: int = 1,
                max_seq_len: int = -1,
                copy_from: Any = None,
                lazy: bool = False,
                num_key_value_heads: int | None = None,
                fixed_device: int | None = None,
            ) -> None:
                runtime.log.cache_tokens.append(max_seq_len)
                runtime.log.cache_kwargs.append({"kind": kind, "lazy": lazy})
                self.max_seq_len = max_seq_len
                self.batch_size = batch_size

        Cache.__name__ = kind
        return Cache

    class ExLlamaV2Tokenizer(StandinTokenizer):
        def __init__(
            self, config: ExLlamaV2Config, lazy_init: bool = True, force_json: bool = False, force_spm: bool = False
        ) -> None:
            super().__init__(str(config.model_dir))

    class ExLlamaV2Filter:
        def __init__(self, model: ExLlamaV2, tokenizer: ExLlamaV2Tokenizer) -> None:
            self.model = model
            self.tokenizer = tokenizer

    class Settings:
        def __init__(
            self,
            token_repetition_penalty: float = 1.025,
            token_frequency_penalty: float = 0.0,
            token_presence_penalty: float = 0.0,
            temperature: float = 0.8,
            top_k: int = 50,
            top_p: float = 0.8,
            min_p: float = 0.0,
            **kwargs: Any,
        ) -> None:
            allowed = {
                "token_repetition_range",
                "token_repetition_decay",
                "smoothing_factor",
                "min_temp",
                "max_temp",
                "temp_exponent",
                "top_a",
                "tfs",
                "typical",
                "skew",
                "temperature_last",
                "mirostat",
                "token_bias",
                "xtc_probability",
                "dry_multiplier",
            }
            assert set(kwargs) <= allowed, kwargs
            self.values = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "allowed")}
            self.token_bias: Any = kwargs.get("token_bias")

    class ExLlamaV2Sampler:
        pass

    ExLlamaV2Sampler.Settings = Settings  # type: ignore[attr-defined]

    class V2Filters:
        """A job's ExLlamaV2Filters as exllamav2 drives them (generator/dynamic.py, generator/sampler.py):
        begin("") before the first sample, next() per step, where (None, None) constrains nothing,
        feed(token) after each sample. Ending on `end_tokens` is left to the stop tokens here."""

        def __init__(self, filters: list[Any]) -> None:
            self.filters = filters
            self.constrained_steps = 0  # steps at which some filter returned a token set

        def start(self, job: Any, generator: Any) -> None:
            for f in self.filters:
                f.begin("")

        def allowed(self) -> tuple[frozenset[int], frozenset[int]] | None:
            answers = [f.next() for f in self.filters]
            sets = [(frozenset(p), frozenset(e or ())) for p, e in answers if p is not None]
            if not sets:
                return None
            self.constrained_steps += 1
            passed = frozenset.intersection(*(p for p, _ in sets))
            return passed, frozenset().union(*(e for _, e in sets))

        def feed(self, token: int) -> bool:
            for f in self.filters:
                f.feed(FakeTensor([[token]]))
            return False

    class ExLlamaV2DynamicGenerator(StandinGenerator):
        def __init__(
            self,
            model: ExLlamaV2,
            cache: Any,
            tokenizer: ExLlamaV2Tokenizer,
            max_batch_size: int | None = None,
            max_seq_len: int | None = None,
            max_chunk_size: int | None = None,
            max_q_size: int = 8,
            paged: bool = True,
            **kwargs: Any,
        ) -> None:
            runtime.log.generator_kwargs.append(
                {"max_batch_size": max_batch_size, "paged": paged, "max_seq_len": max_seq_len, **kwargs}
            )
            if paged:
                assert cache.max_seq_len % PAGE_SIZE == 0, "cache.max_seq_len must be a multiple of 256"
            else:
                assert (max_batch_size or 1) == 1, "unpaged mode runs one job at a time"
            assert max_seq_len is None or max_seq_len <= model.config.max_seq_len
            super().__init__(runtime, tokenizer, cache.max_seq_len, max_batch_size or 1)

    class ExLlamaV2DynamicJob(_JobState):
        def __init__(
            self,
            input_ids: Any,
            max_new_tokens: int,
            min_new_tokens: int = 0,
            max_skips: int | None = 4,
            gen_settings: Any = None,
            seed: int | None = None,
            stop_conditions: Any = None,
            decode_special_tokens: bool = False,
            return_top_tokens: int = 0,
            return_logits: bool = False,
            return_probs: bool = False,
            filters: Any = None,
            filter_prefer_eos: bool = False,
            token_healing: bool = False,
            identifier: Any = None,
            banned_strings: Any = None,
            embeddings: Any = None,
            **kwargs: Any,
        ) -> None:
            self.gen_settings = gen_settings
            grammar = V2Filters(filters) if filters else None
            self._setup(
                input_ids,
                max_new_tokens,
                stop_conditions,
                seed,
                identifier,
                return_top_tokens,
                return_probs,
                grammar,
            )

    core = SimpleNamespace(
        __version__="0.2.8-standin",
        ExLlamaV2Config=ExLlamaV2Config,
        ExLlamaV2=ExLlamaV2,
        ExLlamaV2Cache=cache_class("ExLlamaV2Cache"),
        ExLlamaV2Cache_Q8=cache_class("ExLlamaV2Cache_Q8"),
        ExLlamaV2Cache_Q4=cache_class("ExLlamaV2Cache_Q4"),
        ExLlamaV2Tokenizer=ExLlamaV2Tokenizer,
    )
    generator = SimpleNamespace(
        ExLlamaV2DynamicGenerator=ExLlamaV2DynamicGenerator,
        ExLlamaV2DynamicJob=ExLlamaV2DynamicJob,
        ExLlamaV2Sampler=ExLlamaV2Sampler,
    )
    return (
        core,
        generator,
        SimpleNamespace(ExLlamaV2Filter=ExLlamaV2Filter),
        SimpleNamespace(has_flash_attn_with_paged=True),
    )
