"""A CPU stand-in for the ExLlama runtimes (and the bits of torch they use), for tests without a GPU.

THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). This stand-in lets
CI test everything above the runtime calls: the class and method names and keyword arguments
are those of upstream exllamav3 (Config.from_directory, Model.from_config/load, Cache, Tokenizer,
Generator.enqueue/iterate/cancel, Job, ComboSampler, LLGuidanceFilter) and exllamav2
(ExLlamaV2Config, ExLlamaV2, ExLlamaV2Cache*, load_autosplit, ExLlamaV2DynamicGenerator,
ExLlamaV2DynamicJob, ExLlamaV2Sampler.Settings, ExLlamaV2Filter), with their documented checks
(cache size a multiple of the 256-token page, unpaged mode = one job). Unknown keyword
arguments raise TypeError, so a misspelt argument fails a test.

It "generates" deterministically: each active job gets one token per iterate() from the real
tokenizer's ordinary vocabulary; with a grammar filter it picks, among the tokens the real
llguidance matcher allows, the one that closes structures soonest. Everything it was asked to do
is recorded (`runtime.log`) for the tests to check.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, load_ll_tokenizer

PAGE_SIZE = 256


# ----- torch ------------------------------------------------------------------------------------------


class FakeTensor:
    """Nested lists with the few tensor methods the engines call."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def tolist(self) -> Any:
        return json.loads(json.dumps(self.data))

    def __setitem__(self, index: int, value: float) -> None:
        self.data[index] = value

    @property
    def shape(self) -> tuple[int, ...]:
        shape, value = [], self.data
        while isinstance(value, list):
            shape.append(len(value))
            value = value[0] if value else None
        return tuple(shape)


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError."""


def make_torch(*, devices: int = 1) -> SimpleNamespace:
    """torch.tensor/zeros/long/float and torch.cuda as the engines use them."""
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: devices,
        memory_allocated=lambda index: 1024 * 1024 * (index + 1),
        OutOfMemoryError=OutOfMemoryError,
    )
    return SimpleNamespace(
        __version__="2.6.0-standin",
        version=SimpleNamespace(cuda="12.4"),
        long="int64",
        float="float32",
        tensor=lambda data, dtype=None: FakeTensor(json.loads(json.dumps(data))),
        zeros=lambda shape, dtype=None: FakeTensor([0.0] * shape[0]),
        cuda=cuda,
    )


# ----- shared generation core ------------------------------------------------------------------------


@dataclass
class Behaviour:
    """Knobs a test sets on its stand-in."""

    stop_after: int | None = None  # emit the first stop token after this many tokens
    step_delay_s: float = 0.0  # sleep per iterate() (so a test can cancel mid-stream)
    fail_load: Exception | None = None  # raised by model.load / load_autosplit
    fail_iterate: Exception | None = None  # raised by the next iterate()


@dataclass
class Log:
    """What the engine asked the runtime to do."""

    cache_tokens: list[int] = field(default_factory=list)
    cache_kwargs: list[dict[str, Any]] = field(default_factory=list)
    load_kwargs: list[dict[str, Any]] = field(default_factory=list)
    generator_kwargs: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    cancelled: list[Any] = field(default_factory=list)
    unloaded: int = 0
    max_active: int = 0


class StandinTokenizer:
    """exllamav3.Tokenizer / exllamav2.ExLlamaV2Tokenizer over the folder's tokenizer.json."""

    def __init__(self, directory: str) -> None:
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        self.tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self._plain = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
        self._plain.encode_special_tokens = True  # special-token text stays text
        self.eos_token_id = self.tokenizer.token_to_id("<|im_end|>")
        self.bos_token_id = self.tokenizer.token_to_id("<|endoftext|>")
        special = {t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special}
        self.special_ids = {self.tokenizer.token_to_id(t) for t in special}
        self.ordinary_ids = [i for i in range(self.tokenizer.get_vocab_size()) if i not in self.special_ids]

    def encode(
        self,
        text: str,
        add_bos: bool = False,
        add_eos: bool = False,
        encode_special_tokens: bool = False,
        return_offsets: bool = False,
        embeddings: Any = None,
    ) -> FakeTensor:
        ids = (self.tokenizer if encode_special_tokens else self._plain).encode(text, add_special_tokens=False).ids
        ids = ([self.bos_token_id] if add_bos else []) + ids + ([self.eos_token_id] if add_eos else [])
        return FakeTensor([ids])

    def decode(self, ids: FakeTensor, decode_special_tokens: bool = False) -> str:
        tokens = ids.tolist()
        return str(self.tokenizer.decode(tokens, skip_special_tokens=not decode_special_tokens))


_CLOSERS = '"}]:,0123456789'


class GrammarFilter:
    """exllamav3.LLGuidanceFilter / an ExLlamaV2Filter, backed by the real llguidance matcher."""

    def __init__(self, tokenizer: StandinTokenizer, grammar: str) -> None:
        eos = (tokenizer.eos_token_id,)
        self.matcher = GrammarMatcher(
            load_ll_tokenizer(tokenizer.directory, eos), grammar, tokenizer.tokenizer.get_vocab_size(), eos
        )

    def allowed(self) -> tuple[frozenset[int], frozenset[int]]:
        return self.matcher.allowed()

    def feed(self, token: int) -> None:
        self.matcher.consume(token)


class StandinGenerator:
    """The dynamic generator: pending/active jobs, a paged cache budget, one token per job per iterate()."""

    def __init__(self, runtime: Runtime, tokenizer: StandinTokenizer, cache_tokens: int, max_batch_size: int) -> None:
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.cache_tokens = cache_tokens
        self.max_batch_size = max_batch_size
        self.pending_jobs: list[Any] = []
        self.active_jobs: list[Any] = []
        self.seen_prompts: list[list[int]] = []
        self.serial = 0

    def num_remaining_jobs(self) -> int:
        return len(self.pending_jobs) + len(self.active_jobs)

    def num_active_jobs(self) -> int:
        return len(self.active_jobs)

    def num_pending_jobs(self) -> int:
        return len(self.pending_jobs)

    def enqueue(self, job: Any) -> int:
        need = len(job.prompt) + job.max_new_tokens
        assert need <= self.cache_tokens, f"job needs {need} tokens, cache holds {self.cache_tokens}"
        job.serial_number = self.serial
        self.serial += 1
        self.pending_jobs.append(job)
        self.runtime.log.jobs.append(job)
        return job.serial_number

    def cancel(self, job: Any) -> None:
        self.runtime.log.cancelled.append(job)
        if job in self.pending_jobs:
            self.pending_jobs.remove(job)
        elif job in self.active_jobs:
            self.active_jobs.remove(job)

    def _pages(self, job: Any) -> int:
        return -(-(len(job.prompt) + job.max_new_tokens) // PAGE_SIZE)

    def iterate(self) -> list[dict[str, Any]]:
        behaviour = self.runtime.behaviour
        if behaviour.step_delay_s:
            time.sleep(behaviour.step_delay_s)
        if behaviour.fail_iterate is not None:
            error, behaviour.fail_iterate = behaviour.fail_iterate, None
            raise error
        results: list[dict[str, Any]] = []
        used = sum(self._pages(j) for j in self.active_jobs)
        while self.pending_jobs and len(self.active_jobs) < self.max_batch_size:
            job = self.pending_jobs[0]
            if (used + self._pages(job)) * PAGE_SIZE > self.cache_tokens:
                break
            self.pending_jobs.pop(0)
            used += self._pages(job)
            self.active_jobs.append(job)
            job.cached_tokens = self._cached(job.prompt)
            self.seen_prompts.append(job.prompt)
            results.append(
                {
                    "job": job,
                    "stage": "started",
                    "eos": False,
                    "serial": job.serial_number,
                    "identifier": job.identifier,
                }
            )
        self.runtime.log.max_active = max(self.runtime.log.max_active, len(self.active_jobs))
        for job in list(self.active_jobs):
            results.append(self._step(job))
        return results

    def _cached(self, prompt: list[int]) -> int:
        best = 0
        for seen in self.seen_prompts:
            same = 0
            for a, b in zip(seen, prompt, strict=False):
                if a != b:
                    break
                same += 1
            best = max(best, same // PAGE_SIZE * PAGE_SIZE)
        return best

    def _choose(self, job: Any) -> int:
        position = job.new_tokens
        stop_after = self.runtime.behaviour.stop_after
        if job.stop_tokens and stop_after is not None and position >= stop_after and job.grammar is None:
            return int(job.stop_tokens[0])
        if job.grammar is not None:
            allowed, ending = job.grammar.allowed()
            if ending & set(job.stop_tokens or ()):
                return min(ending)

            def rank(token: int) -> tuple[int, int]:
                text = self.tokenizer.tokenizer.decode([token])
                first = text[:1]
                return (_CLOSERS.index(first) if first and first in _CLOSERS else len(_CLOSERS), token)

            return min((t for t in allowed if t not in self.tokenizer.special_ids), key=rank)
        ordinary = self.tokenizer.ordinary_ids
        return ordinary[(sum(job.prompt) * 31 + position * 7 + (job.seed or 0)) % len(ordinary)]

    def _step(self, job: Any) -> dict[str, Any]:
        token = self._choose(job)
        base = {"job": job, "stage": "streaming", "serial": job.serial_number, "identifier": job.identifier}
        if token in job.stop_tokens:
            self.active_jobs.remove(job)
            return {
                **base,
                "eos": True,
                "eos_reason": "stop_token",
                "eos_triggering_token_id": token,
                **self._usage(job),
            }
        if job.grammar is not None:
            job.grammar.feed(token)
        job.new_tokens += 1
        out = {
            **base,
            "eos": False,
            "text": self.tokenizer.tokenizer.decode([token]),
            "token_ids": FakeTensor([[token]]),
        }
        if job.return_probs:
            out["token_probs"] = FakeTensor([[0.5]])
        if job.return_top_tokens:
            top = [token, *self.tokenizer.ordinary_ids[: job.return_top_tokens - 1]]
            out["top_k_tokens"] = FakeTensor([[top]])
            out["top_k_probs"] = FakeTensor([[[0.5] + [0.1] * (len(top) - 1)]])
        if job.new_tokens >= job.max_new_tokens:
            self.active_jobs.remove(job)
            out.update(eos=True, eos_reason="max_new_tokens", **self._usage(job))
        elif job.grammar is not None and job.grammar.matcher._matcher.is_stopped() and job.end_on_grammar:
            self.active_jobs.remove(job)
            out.update(eos=True, eos_reason="end_filter", **self._usage(job))
        return out

    def _usage(self, job: Any) -> dict[str, Any]:
        return {"new_tokens": job.new_tokens, "prompt_tokens": len(job.prompt), "cached_tokens": job.cached_tokens}


class _JobState:
    """Fields both runtimes' jobs carry in the stand-in."""

    def _setup(
        self,
        input_ids: FakeTensor,
        max_new_tokens: int,
        stop_conditions: Any,
        seed: int | None,
        identifier: Any,
        return_top_tokens: int,
        return_probs: bool,
        grammar: GrammarFilter | None,
        end_on_grammar: bool,
    ) -> None:
        assert isinstance(input_ids, FakeTensor) and len(input_ids.shape) == 2 and input_ids.shape[0] == 1, (
            "input_ids must be [1, seq_len] tensor"
        )
        self.prompt = input_ids.tolist()[0]
        self.max_new_tokens = max_new_tokens
        self.stop_tokens = [t for t in (stop_conditions or []) if isinstance(t, int)]
        self.seed = seed
        self.identifier = identifier
        self.return_top_tokens = return_top_tokens
        self.return_probs = return_probs
        self.grammar = grammar
        self.end_on_grammar = end_on_grammar
        self.new_tokens = 0
        self.cached_tokens = 0
        self.serial_number = -1


# ----- exllamav3 --------------------------------------------------------------------------------------


class Runtime:
    """One stand-in runtime instance (fresh per test), with its behaviour knobs and its log."""

    def __init__(self, behaviour: Behaviour | None = None, devices: int = 1) -> None:
        self.behaviour = behaviour or Behaviour()
        self.log = Log()
        self.torch = make_torch(devices=devices)
        self.exllamav3 = _make_v3(self)
        v2 = _make_v2(self)
        self.exllamav2, self.v2_generator, self.v2_filters, self.v2_attn = v2


def _make_v3(runtime: Runtime) -> SimpleNamespace:
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


# ----- exllamav2 --------------------------------------------------------------------------------------


def _make_v2(runtime: Runtime) -> tuple[SimpleNamespace, SimpleNamespace, SimpleNamespace, SimpleNamespace]:
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

    class V2Filter:
        """Adapts the engine's ExLlamaV2Filter subclass (begin/feed/next) to the stand-in generator."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.matcher = inner.matcher
            inner.begin("")

        def allowed(self) -> tuple[frozenset[int], frozenset[int]]:
            passed, ending = self.inner.next()
            return frozenset(passed), frozenset(ending)

        def feed(self, token: int) -> None:
            self.inner.feed(token)

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
            grammar = V2Filter(filters[0]) if filters else None
            self._setup(
                input_ids,
                max_new_tokens,
                stop_conditions,
                seed,
                identifier,
                return_top_tokens,
                return_probs,
                grammar,
                False,
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
