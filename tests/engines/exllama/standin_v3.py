"""The exllamav3 part of the stand-in: upstream's names and keyword arguments (see standin.py).

Signatures follow exllamav3's model/config.py, model/model.py (load_gen), cache/cache.py, tokenizer/tokenizer.py,
generator/generator.py, generator/job.py, generator/sampler/presets.py (ComboSampler) and
generator/filter/llguidance.py. THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tests.engines.exllama.standin_core import PAGE_SIZE, GrammarFilter, StandinGenerator, StandinTokenizer, _JobState

if TYPE_CHECKING:
    from tests.engines.exllama.standin import Runtime


def make_v3(runtime: Runtime) -> SimpleNamespace:
    class Config:
        def __init__(self, directory: str) -> None:
            self.directory = directory
            self.config_dict = json.loads((Path(directory) / "config.json").read_text())

        @staticmethod
        def from_directory(directory: str, **kwargs: Any) -> Config:
            return Config(directory)

    class Model:
        def __init__(self, config: Config) -> None:
            self.config = config

        @staticmethod
        def from_config(config: Config, component: str = "text", **kwargs: Any) -> Model:
            return Model(config)

        def load(
            self,
            device: Any = None,
            tp_output_device: Any = None,
            reserve_per_device: Any = None,
            use_per_device: Any = None,
            tensor_p: bool = False,
            progressbar: bool = False,
            max_chunk_size: int = 2048,
            max_output_size: int = 32,
            max_output_factor: int = 1,
            callback: Any = None,
            generator: bool = True,
            tp_dev_limits: Any = None,
            tp_backend: str = "native",
            verbose: bool = False,
            max_batch_size: int = 1,
        ) -> None:
            runtime.log.load_kwargs.append({"tensor_p": tensor_p, "use_per_device": use_per_device})
            if runtime.behaviour.fail_load is not None:
                raise runtime.behaviour.fail_load

        def unload(self) -> None:
            runtime.log.unloaded += 1

    class CacheLayer_fp16:
        pass

    class CacheLayer_quant:
        pass

    class Cache:
        def __init__(
            self,
            model: Model,
            max_num_tokens: int,
            layer_type: Any = None,
            max_batch_size: int = 16,
            max_history: int = 0,
            **kwargs: Any,
        ) -> None:
            assert max_num_tokens % PAGE_SIZE == 0, "max_num_tokens must be a multiple of the page size (256)"
            assert set(kwargs) <= {"k_bits", "v_bits"}, kwargs
            runtime.log.cache_tokens.append(max_num_tokens)
            runtime.log.cache_kwargs.append({"layer_type": layer_type, **kwargs})
            self.max_num_tokens = max_num_tokens

    class Tokenizer(StandinTokenizer):
        @staticmethod
        def from_config(config: Config) -> Tokenizer:
            return Tokenizer(config.directory)

    class ComboSampler:
        def __init__(
            self,
            rep_p: float = 1.0,
            freq_p: float = 0.0,
            pres_p: float = 0.0,
            rep_sustain_range: int = int(10e7),
            rep_decay_range: int = 0,
            temperature: float = 1.0,
            min_p: float = 0.0,
            top_k: int = 0,
            top_p: float = 1.0,
            temp_last: bool = False,
            adaptive_target: float = 1.0,
            adaptive_decay: float = 0.9,
            logit_bias: dict[int, float] | None = None,
        ) -> None:
            self.settings = {k: v for k, v in locals().items() if k != "self"}

    class LLGuidanceFilter(GrammarFilter):
        def __init__(
            self,
            tokenizer: Tokenizer,
            trigger_token: int | None = None,
            prefix_str: str | None = None,
            eos_after_completed: bool = False,
            json_schema: Any = None,
            regex: str | None = None,
            lark_grammar: str | None = None,
            gbnf_grammar: str | None = None,
            llg_grammar: str | None = None,
            consume_prefix: bool = False,
        ) -> None:
            assert lark_grammar is not None, "the engine passes Lark grammars"
            super().__init__(tokenizer, lark_grammar)
            self.eos_after_completed = eos_after_completed

    class Generator(StandinGenerator):
        def __init__(
            self,
            model: Model,
            cache: Cache,
            tokenizer: Tokenizer,
            max_batch_size: int = 256,
            max_chunk_size: int = 2048,
            max_q_size: int = 8,
            **kwargs: Any,
        ) -> None:
            runtime.log.generator_kwargs.append({"max_batch_size": max_batch_size, **kwargs})
            super().__init__(runtime, tokenizer, cache.max_num_tokens, max_batch_size)

    class Job(_JobState):
        def __init__(
            self,
            input_ids: Any,
            max_new_tokens: int | None = None,
            min_new_tokens: int = 0,
            max_skips: int | None = 4,
            sampler: Any = None,
            seed: int | None = None,
            stop_conditions: Any = None,
            decode_special_tokens: bool = False,
            return_top_tokens: int = 0,
            return_logits: bool = False,
            return_probs: bool = False,
            filters: Any = None,
            token_healing: bool = False,
            identifier: Any = None,
            banned_strings: Any = None,
            embeddings: Any = None,
            max_rq_tokens: int | None = None,
            stop_on_loop: Any = None,
            rq_state: Any = None,
        ) -> None:
            grammar = filters[0] if filters else None
            self.sampler = sampler
            self._setup(
                input_ids,
                max_new_tokens or 256,
                stop_conditions,
                seed,
                identifier,
                return_top_tokens,
                return_probs,
                grammar,
                bool(grammar and grammar.eos_after_completed),
            )

    return SimpleNamespace(
        __version__="0.0.6-standin",
        Config=Config,
        Model=Model,
        Cache=Cache,
        CacheLayer_fp16=CacheLayer_fp16,
        CacheLayer_quant=CacheLayer_quant,
        Tokenizer=Tokenizer,
        ComboSampler=ComboSampler,
        LLGuidanceFilter=LLGuidanceFilter,
        Generator=Generator,
        Job=Job,
    )
