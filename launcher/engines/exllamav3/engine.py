"""The ExLlamaV3 engine: EXL3 folders on one or more NVIDIA GPUs (Ampere or newer).

Runtime calls, as in upstream exllamav3 (examples/dynamic_gen.py, model/model.py, cache/cache.py,
generator/generator.py, generator/job.py):

    config = Config.from_directory(dir); model = Model.from_config(config)
    cache = Cache(model, max_num_tokens=N[, layer_type=CacheLayer_quant, k_bits=, v_bits=])  # before load
    model.load(tensor_p=True | False)       # autosplit over the GPUs, or tensor parallel on 2+
    tokenizer = Tokenizer.from_config(config)
    generator = Generator(model=, cache=, tokenizer=, max_batch_size=)
    Job(input_ids=, max_new_tokens=, stop_conditions=, sampler=ComboSampler(...), seed=, filters=
        [LLGuidanceFilter(tokenizer, lark_grammar=, eos_after_completed=True)], return_top_tokens=,
        return_probs=, identifier=)

A lazy grammar (tool calls on tool_choice "auto") runs in our own Filter subclass (_filter.py, never run
on a GPU) instead of LLGuidanceFilter.

Verified only on an NVIDIA GPU (scripts/gpu-check); CPU tests use tests/engines/exllama/standin.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.core.config import ServeConfig
from launcher.core.errors import EngineUnavailableError, ModelDoesNotFitError, ModelFormatError
from launcher.engine_specs import Availability
from launcher.engines.exllama_common._availability import Environment, check_cuda_engine, describe
from launcher.engines.exllama_common._backend import JobSpec
from launcher.engines.exllama_common._engine import ExLlamaEngineBase, GeneratorBackend, RuntimeTokenizer
from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, LazyGrammarMatcher, load_ll_tokenizer
from launcher.engines.exllama_common._hf_files import HfModelFiles
from launcher.engines.exllama_common._sampling import combo_sampler_kwargs
from launcher.engines.exllama_common._sizing import CachePlan
from launcher.engines.exllama_common.spec_checks import AMPERE
from launcher.engines.exllamav3._filter import lazy_filter_class, runs_lazy_filters
from launcher.engines.exllamav3.spec import SPEC
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.exllamav3")

_KV_BITS = {"q8_0": 8, "q4_0": 4}


@dataclass(frozen=True)
class V3Runtime:
    """The imported runtime: the `exllamav3` package and `torch` (a stand-in in CPU tests)."""

    exllamav3: Any
    torch: Any


def import_runtime() -> V3Runtime:
    """Import exllamav3 and torch (slow: loads CUDA kernels); raises EngineUnavailableError."""
    try:
        import exllamav3
        import torch
    except ImportError as err:
        raise EngineUnavailableError(f"ExLlamaV3 is not installed ({err}): {SPEC.install_hint}") from err
    return V3Runtime(exllamav3, torch)


class V3Backend(GeneratorBackend):
    """An EXL3 model, its paged cache and the dynamic generator (called from the scheduler thread)."""

    def __init__(self, runtime: V3Runtime, files: HfModelFiles, plan: CachePlan) -> None:
        ex, torch = runtime.exllamav3, runtime.torch
        self._ex = ex
        self.version = str(getattr(ex, "__version__", "unknown"))
        config = ex.Config.from_directory(str(files.directory))
        self._model = ex.Model.from_config(config)
        cache_kwargs: dict[str, Any] = {}
        if plan.kv_type in _KV_BITS:  # f16: the default cache layer
            bits = _KV_BITS[plan.kv_type]
            cache_kwargs = {"layer_type": ex.CacheLayer_quant, "k_bits": bits, "v_bits": bits}
        # The cache exists before load() so the autosplit / tensor-parallel split accounts for it.
        self._cache = ex.Cache(self._model, max_num_tokens=plan.cache_tokens, **cache_kwargs)
        try:
            self._model.load(tensor_p=plan.tensor_parallel)
        except Exception as err:
            self._unload()
            if isinstance(err, getattr(getattr(torch, "cuda", None), "OutOfMemoryError", ())):
                raise ModelDoesNotFitError(
                    f"{files.directory.name} ran out of GPU memory while loading with a {plan.cache_tokens}-token "
                    "cache: lower --context or --parallel, use --kv-cache-type q4_0, or choose a smaller bpw."
                ) from err
            raise ModelFormatError(f"ExLlamaV3 {self.version} could not load {files.directory.name}: {err}") from err
        self._tokenizer = RuntimeTokenizer(ex.Tokenizer.from_config(config), torch)
        self._generator = ex.Generator(
            model=self._model, cache=self._cache, tokenizer=self._tokenizer.tokenizer, max_batch_size=plan.parallel
        )
        self._torch = torch
        self._files = files
        self.lazy_constraints = runs_lazy_filters(ex.Filter)
        self._lazy_filter_class = lazy_filter_class(ex.Filter, torch)
        self._ll_tokenizer: object | None = None

    def _lazy_filter(self, grammar: str, triggers: tuple[str, ...]) -> Any:
        """Our Filter over a LazyGrammarMatcher, which has its own llguidance tokenizer (built once)."""
        files = self._files
        if self._ll_tokenizer is None:
            self._ll_tokenizer = load_ll_tokenizer(files.directory, files.eos_token_ids)
        matcher = GrammarMatcher(self._ll_tokenizer, grammar, files.vocab_size, files.eos_token_ids)
        return self._lazy_filter_class(self._tokenizer.tokenizer, LazyGrammarMatcher(matcher, triggers))

    def make_job(self, spec: JobSpec) -> Any:
        """An exllamav3 Job for this request."""
        ex = self._ex
        filters = None
        if spec.grammar is not None and spec.triggers:
            filters = [self._lazy_filter(spec.grammar, spec.triggers)]
        elif spec.grammar is not None:
            # exllamav3/generator/filter/llguidance.py; eos_after_completed ends the job with the grammar.
            filters = [
                ex.LLGuidanceFilter(self._tokenizer.tokenizer, lark_grammar=spec.grammar, eos_after_completed=True)
            ]
        return ex.Job(
            input_ids=self._tokenizer.input_ids(spec.prompt),
            max_new_tokens=spec.max_new_tokens,
            stop_conditions=list(spec.stop_tokens),
            sampler=ex.ComboSampler(**combo_sampler_kwargs(spec.sampling)),
            seed=spec.sampling.seed,
            filters=filters,
            return_top_tokens=spec.top_logprobs or 0,
            return_probs=spec.top_logprobs is not None,
            identifier=spec.identifier,
        )


class ExLlamaV3Engine(ExLlamaEngineBase):
    """EXL3 models with ExLlamaV3's dynamic generator; tensor parallel on 2+ GPUs."""

    name = "exllamav3"
    model_format = "exl3"

    def __init__(
        self,
        runtime: Callable[[], V3Runtime] = import_runtime,
        *,
        env: Environment | None = None,
        machine: Callable[[], Machine] | None = None,
    ) -> None:
        super().__init__(env=env, machine=machine)
        self._runtime = runtime

    def availability(self, machine: Machine) -> Availability:
        """Installed, an NVIDIA GPU of compute capability >= 8.0, and a CUDA build of torch."""
        checked = check_cuda_engine(
            machine,
            self._env,
            package="exllamav3",
            label="ExLlamaV3",
            engine="exllamav3",
            min_compute=AMPERE,
            compute_hint="use EXL2 or GGUF",
        )
        if isinstance(checked, Availability):
            return checked
        version, cuda = checked
        note = f"tensor parallel over {len(machine.nvidia_gpus)} GPUs" if len(machine.nvidia_gpus) >= 2 else ""
        return Availability(
            usable=True, reason=describe("exllamav3", version, cuda, machine, note), version=version, backend="cuda"
        )

    def _build_backend(self, files: HfModelFiles, plan: CachePlan, config: ServeConfig) -> V3Backend:
        return V3Backend(self._runtime(), files, plan)
