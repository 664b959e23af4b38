"""The exllamav3 part of the stand-in: upstream's names and keyword arguments (see standin.py).

Signatures follow exllamav3's model/config.py, model/model.py (load_gen), cache/cache.py, tokenizer/tokenizer.py,
generator/generator.py, generator/job.py, generator/sampler/presets.py (ComboSampler), and
generator/filter/filter.py and llguidance.py as of 1.4.1 (the first release with LLGuidanceFilter).
THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, load_ll_tokenizer
from tests.engines.exllama.standin_core import PAGE_SIZE, StandinGenerator, StandinTokenizer, _JobState

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

    class Filter:
        """exllamav3.Filter (generator/filter/filter.py, 1.4.1) without the rewind journal (banned strings)."""

        def __init__(
            self, tokenizer: Tokenizer, trigger_token: int | None, prefix_str: str | None, eos_after_completed: bool
        ) -> None:
            self.tokenizer = tokenizer
            self.trigger_token = trigger_token
            self.prefix_str = prefix_str
            self.eos_after_completed = eos_after_completed
            self.job: Any = None
            self.generator: Any = None
            self.vocab_size: int | None = None
            self.is_active = trigger_token is None

        def feed(self, token: int) -> bool:
            if not self.is_active:
                if token == self.trigger_token:
                    self.is_active = True
                    self.reset()
                return False
            self.accept_token(token)
            if self.is_completed():
                self.is_active = False
                return self.eos_after_completed
            return False

        def rewind(self, num_tokens: int) -> None:
            raise NotImplementedError("the stand-in has no banned strings")

        def reset(self) -> None:
            raise NotImplementedError

        def accept_token(self, token: int) -> None:
            raise NotImplementedError

        def get_next_logit_mask(self) -> Any:
            raise NotImplementedError

        def is_completed(self) -> bool:
            raise NotImplementedError

        def use_background_worker(self) -> bool:
            return True

        def attach(self, job: Any) -> None:
            self.job = job
            self.generator = job.generator
            self.vocab_size = job.generator.padded_vocab_size

    class LLGuidanceFilter(Filter):
        """As upstream: the real llguidance matcher, its mask a packed int32 bitmask."""

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
            super().__init__(tokenizer, trigger_token, prefix_str, eos_after_completed)
            eos = (tokenizer.eos_token_id,)
            table = load_ll_tokenizer(tokenizer.directory, eos)
            self.matcher = GrammarMatcher(table, lark_grammar, tokenizer.tokenizer.get_vocab_size(), eos)

        def reset(self) -> None:
            self.matcher.reset()

        def accept_token(self, token: int) -> None:
            if not self.matcher.completed:
                self.matcher.consume(token)

        def get_next_logit_mask(self) -> Any:
            return runtime.torch.from_numpy(self.matcher.bitmask().view(np.int32)).unsqueeze(0)

        def is_completed(self) -> bool:
            return self.matcher.completed

    class V3Filters:
        """A job's filters as exllamav3 1.4.1 drives them (generator/job.py, generator/generator.py):
        attach, reset and is_active = (trigger_token is None) when the job starts; a mask from each
        active filter per step (packed int32 bitmasks here); feed(token) to all after each sample, any
        True ending the job with eos_reason "end_filter"."""

        def __init__(self, filters: list[Any]) -> None:
            self.filters = filters
            self.stop_tokens: frozenset[int] = frozenset()
            self.masks_asked = 0

        def start(self, job: Any, generator: Any) -> None:
            job.generator = generator
            self.stop_tokens = frozenset(job.stop_tokens)
            for f in self.filters:
                f.attach(job)
                f.reset()
                f.is_active = f.trigger_token is None

        def allowed(self) -> tuple[frozenset[int], frozenset[int]] | None:
            masks = [f.get_next_logit_mask() for f in self.filters if f.is_active]
            if not masks:
                return None
            self.masks_asked += len(masks)
            sets = []
            for mask in masks:
                assert mask.numpy().dtype == np.int32 and mask.numpy().shape[0] == 1, "a packed (1, n) bitmask"
                bits = np.unpackbits(mask.numpy()[0].view(np.uint8), bitorder="little")
                sets.append(frozenset(int(t) for t in np.flatnonzero(bits)))
            allowed = frozenset.intersection(*sets)
            return allowed, allowed & self.stop_tokens

        def feed(self, token: int) -> bool:
            return any([f.feed(token) for f in self.filters])

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
            grammar = V3Filters(filters) if filters else None
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
            )

    return SimpleNamespace(
        __version__="0.0.6-standin",
        Config=Config,
        Model=Model,
        Cache=Cache,
        CacheLayer_fp16=CacheLayer_fp16,
        CacheLayer_quant=CacheLayer_quant,
        Filter=Filter,
        Tokenizer=Tokenizer,
        ComboSampler=ComboSampler,
        LLGuidanceFilter=LLGuidanceFilter,
        Generator=Generator,
        Job=Job,
    )
