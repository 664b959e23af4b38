"""The ExLlamaV2 engine: EXL2 folders on NVIDIA GPUs. Legacy (archived upstream), kept for EXL2 files
and pre-Ampere cards.

Runtime calls, as in upstream exllamav2 (examples/inference_lmfe.py, model.py, cache.py,
generator/dynamic.py, generator/sampler.py):

    config = ExLlamaV2Config(dir); config.max_seq_len = context; config.arch_compat_overrides()
    model = ExLlamaV2(config)
    cache = ExLlamaV2Cache[_Q8|_Q4](model, max_seq_len=N, lazy=True); model.load_autosplit(cache)
    tokenizer = ExLlamaV2Tokenizer(config)
    generator = ExLlamaV2DynamicGenerator(model=, cache=, tokenizer=, max_batch_size=, max_seq_len=, paged=)
    ExLlamaV2DynamicJob(input_ids=, max_new_tokens=, stop_conditions=, gen_settings=ExLlamaV2Sampler.Settings(..),
                        seed=, filters=, return_top_tokens=, return_probs=, identifier=)

Paged attention (and so batching) needs flash-attn >= 2.5.7 on an Ampere+ GPU; without it the
generator runs unpaged, one job at a time. Verified only on an NVIDIA GPU (scripts/gpu-check).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.core.config import ServeConfig
from launcher.core.errors import EngineError, EngineUnavailableError, ModelDoesNotFitError, ModelFormatError
from launcher.engine_specs import Availability
from launcher.engines.exllama_common._availability import (
    FLASH_ATTN_PAGED,
    Environment,
    check_cuda_engine,
    describe,
    version_tuple,
)
from launcher.engines.exllama_common._backend import JobSpec
from launcher.engines.exllama_common._engine import ExLlamaEngineBase, GeneratorBackend, RuntimeTokenizer
from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, LazyGrammarMatcher, load_ll_tokenizer
from launcher.engines.exllama_common._hf_files import HfModelFiles
from launcher.engines.exllama_common._sampling import v2_settings_kwargs
from launcher.engines.exllama_common._sizing import CachePlan
from launcher.engines.exllamav2._filter import llguidance_filter_class
from launcher.engines.exllamav2.spec import SPEC
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.exllamav2")

NO_BATCHING = "usable, but without flash-attn the dynamic generator runs one job at a time (no batching)"


@dataclass(frozen=True)
class V2Runtime:
    """The imported runtime modules (stand-ins in CPU tests)."""

    exllamav2: Any  # ExLlamaV2, ExLlamaV2Config, ExLlamaV2Cache*, ExLlamaV2Tokenizer
    generator: Any  # exllamav2.generator: ExLlamaV2DynamicGenerator, ExLlamaV2DynamicJob, ExLlamaV2Sampler
    filters: Any  # exllamav2.generator.filters: ExLlamaV2Filter
    attn: Any  # exllamav2.attn: has_flash_attn_with_paged
    torch: Any


def import_runtime() -> V2Runtime:
    """Import exllamav2 and torch (slow: loads CUDA kernels); raises EngineUnavailableError."""
    try:
        import exllamav2
        import exllamav2.attn
        import exllamav2.generator
        import exllamav2.generator.filters
        import torch
    except ImportError as err:
        raise EngineUnavailableError(f"ExLlamaV2 is not installed ({err}): {SPEC.install_hint}") from err
    return V2Runtime(exllamav2, exllamav2.generator, exllamav2.generator.filters, exllamav2.attn, torch)


def batching_problem(machine: Machine, env: Environment) -> str | None:
    """Why the dynamic generator cannot batch here (paged attention unavailable), or None."""
    version = env.package_version("flash_attn")
    if version is None:
        return NO_BATCHING
    if version_tuple(version) < FLASH_ATTN_PAGED:
        need = ".".join(map(str, FLASH_ATTN_PAGED))
        return f"usable, but flash-attn {version} < {need} cannot page the cache, so one job runs at a time"
    if any(g.compute_capability is not None and g.compute_capability < (8, 0) for g in machine.nvidia_gpus):
        return "usable, but flash-attn needs compute capability 8.0, so one job runs at a time (no batching)"
    return None


class V2Backend(GeneratorBackend):
    """An EXL2 model, its cache and the dynamic generator (called from the scheduler thread)."""

    lazy_constraints = True  # our own filter (_filter.py) waits for the trigger (never run on a GPU yet)

    def __init__(self, runtime: V2Runtime, files: HfModelFiles, plan: CachePlan) -> None:
        ex, torch = runtime.exllamav2, runtime.torch
        self._gen = runtime.generator
        self._torch = torch
        self._files = files
        self.version = str(getattr(ex, "__version__", "unknown"))
        paged = bool(getattr(runtime.attn, "has_flash_attn_with_paged", False))
        if plan.parallel > 1 and not paged:
            raise EngineError(
                "exllamav2 cannot use flash-attn for paged attention here, so it cannot run "
                f"{plan.parallel} requests at once: restart with --parallel 1, or install flash-attn >= 2.5.7"
            )
        config = ex.ExLlamaV2Config(str(files.directory))
        config.max_seq_len = plan.context
        config.arch_compat_overrides()
        self._model = ex.ExLlamaV2(config)
        caches = {"f16": ex.ExLlamaV2Cache, "q8_0": ex.ExLlamaV2Cache_Q8, "q4_0": ex.ExLlamaV2Cache_Q4}
        cache_class = caches[plan.kv_type]
        # Unpaged mode needs a batch-1 cache of exactly one sequence (generator/dynamic.py, paged=False).
        self._cache = cache_class(self._model, max_seq_len=plan.cache_tokens if paged else plan.context, lazy=True)
        try:
            self._model.load_autosplit(self._cache)
        except Exception as err:
            self._unload()
            if isinstance(err, getattr(getattr(torch, "cuda", None), "OutOfMemoryError", ())):
                raise ModelDoesNotFitError(
                    f"{files.directory.name} ran out of GPU memory while loading: lower --context or --parallel, "
                    "use --kv-cache-type q4_0, or choose a smaller bpw."
                ) from err
            raise ModelFormatError(f"ExLlamaV2 {self.version} could not load {files.directory.name}: {err}") from err
        self._vocab_size = int(getattr(config, "vocab_size", 0) or files.vocab_size)
        self._tokenizer = RuntimeTokenizer(ex.ExLlamaV2Tokenizer(config), torch)
        self._generator = self._gen.ExLlamaV2DynamicGenerator(
            model=self._model,
            cache=self._cache,
            tokenizer=self._tokenizer.tokenizer,
            max_batch_size=plan.parallel,
            max_seq_len=plan.context,
            paged=paged,
        )
        self._filter_class = llguidance_filter_class(runtime.filters.ExLlamaV2Filter)
        self._ll_tokenizer: object | None = None

    def make_job(self, spec: JobSpec) -> Any:
        """An ExLlamaV2DynamicJob for this request."""
        settings = self._gen.ExLlamaV2Sampler.Settings(**v2_settings_kwargs(spec.sampling))
        if spec.sampling.logit_bias and self._vocab_size:
            bias = self._torch.zeros((self._vocab_size,), dtype=self._torch.float)
            for token, value in spec.sampling.logit_bias.items():
                if 0 <= token < self._vocab_size:
                    bias[token] = value
            settings.token_bias = bias
        filters = None
        if spec.grammar is not None:
            if self._ll_tokenizer is None:
                self._ll_tokenizer = load_ll_tokenizer(self._files.directory, self._files.eos_token_ids)
            matcher = GrammarMatcher(self._ll_tokenizer, spec.grammar, self._vocab_size, self._files.eos_token_ids)
            lazy = LazyGrammarMatcher(matcher, spec.triggers) if spec.triggers else None
            filters = [self._filter_class(self._model, self._tokenizer.tokenizer, lazy or matcher)]
        return self._gen.ExLlamaV2DynamicJob(
            input_ids=self._tokenizer.input_ids(spec.prompt),
            max_new_tokens=spec.max_new_tokens,
            stop_conditions=list(spec.stop_tokens),
            gen_settings=settings,
            seed=spec.sampling.seed,
            filters=filters,
            return_top_tokens=spec.top_logprobs or 0,
            return_probs=spec.top_logprobs is not None,
            identifier=spec.identifier,
        )


class ExLlamaV2Engine(ExLlamaEngineBase):
    """EXL2 models with ExLlamaV2's dynamic generator (automatic split over GPUs)."""

    name = "exllamav2"
    model_format = "exl2"

    def __init__(
        self,
        runtime: Callable[[], V2Runtime] = import_runtime,
        *,
        env: Environment | None = None,
        machine: Callable[[], Machine] | None = None,
    ) -> None:
        super().__init__(env=env, machine=machine)
        self._runtime = runtime

    def availability(self, machine: Machine) -> Availability:
        """Installed, an NVIDIA GPU and a CUDA build of torch; says when batching is off (no flash-attn)."""
        checked = check_cuda_engine(
            machine, self._env, package="exllamav2", label="ExLlamaV2", engine="exllamav2", min_compute=None
        )
        if isinstance(checked, Availability):
            return checked
        version, cuda = checked
        reason = describe("exllamav2", version, cuda, machine)
        problem = batching_problem(machine, self._env)
        if problem:
            reason += f": {problem}"
        return Availability(usable=True, reason=reason, version=version, backend="cuda")

    def _parallel(self, machine: Machine, config: ServeConfig) -> int:
        if batching_problem(machine, self._env) and config.parallel > 1:
            log.warning("exllamav2 without paged attention: serving one request at a time (--parallel 1)")
            return 1
        return config.parallel

    def _build_backend(self, files: HfModelFiles, plan: CachePlan, config: ServeConfig) -> V2Backend:
        return V2Backend(self._runtime(), files, plan)
