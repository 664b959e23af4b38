"""The load flow both ExLlama engines share: check, read the folder, size the cache, build, wrap.

Subclasses say how to check availability and how to build their runtime's `Backend`; the rest
(model files, the advisor's cache plan, ModelInfo, the scheduler) is common.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from launcher.core.config import ServeConfig
from launcher.core.errors import EngineUnavailableError
from launcher.core.model_types import LocalModel
from launcher.engine_specs import Availability, get_spec
from launcher.engines.base import ModelInfo
from launcher.engines.exllama_common._availability import Environment
from launcher.engines.exllama_common._backend import Backend
from launcher.engines.exllama_common._hf_files import ExllamaFormat, HfModelFiles, read_model_files
from launcher.engines.exllama_common._model import ExLlamaModel
from launcher.engines.exllama_common._scheduler import flat_list
from launcher.engines.exllama_common._sizing import CachePlan, plan_cache
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.exllama")


def probed_machine() -> Machine:
    """This machine (the probe is cached per process)."""
    from launcher.hardware.probe import probe_machine

    return probe_machine()


def cuda_memory(torch: Any) -> dict[str, int]:
    """Bytes of CUDA memory this process has allocated, summed over devices (best effort, never raises)."""
    try:
        cuda = torch.cuda
        total = 0
        for index in range(int(cuda.device_count())):
            total += int(cuda.memory_allocated(index))
    except Exception:  # /metrics must not fail because a memory query did
        return {}
    return {"cuda_allocated": total}


class RuntimeTokenizer:
    """encode/decode over an ExLlama tokenizer: both runtimes share these signatures
    (exllamav3/tokenizer/tokenizer.py and exllamav2/tokenizer/tokenizer.py: `encode(text, add_bos=,
    encode_special_tokens=)` -> tensor (1, n); `decode(ids_1d, decode_special_tokens=)` -> str)."""

    def __init__(self, tokenizer: Any, torch: Any) -> None:
        self.tokenizer = tokenizer
        self._torch = torch

    def encode(self, text: str, *, add_bos: bool, special: bool) -> list[int]:
        """Text to token ids."""
        ids = self.tokenizer.encode(text, add_bos=add_bos, encode_special_tokens=special)
        return [int(t) for t in flat_list(ids)]

    def decode(self, tokens: list[int]) -> str:
        """Token ids to text, special tokens written out."""
        ids = self._torch.tensor(tokens, dtype=self._torch.long)
        return str(self.tokenizer.decode(ids, decode_special_tokens=True))

    def input_ids(self, tokens: list[int]) -> Any:
        """A prompt as the runtimes want it: a CPU tensor of shape (1, n)."""
        return self._torch.tensor([tokens], dtype=self._torch.long)


class GeneratorBackend:
    """The part of a `Backend` both runtimes share once their dynamic generator exists.

    Subclasses set `lazy_constraints`, `_tokenizer` (RuntimeTokenizer), `_generator`, `_model` and
    `_torch` in their `__init__` and add `make_job`; the generator calls are the same in exllamav2 and exllamav3
    (generator.py of each: enqueue(job), cancel(job), iterate() -> list of result dicts).
    """

    lazy_constraints: bool
    _tokenizer: RuntimeTokenizer
    _generator: Any
    _model: Any
    _torch: Any

    def encode(self, text: str, *, add_bos: bool, special: bool) -> list[int]:
        """Text to token ids."""
        return self._tokenizer.encode(text, add_bos=add_bos, special=special)

    def decode(self, tokens: list[int]) -> str:
        """Token ids to text."""
        return self._tokenizer.decode(tokens)

    def enqueue(self, job: Any) -> None:
        """generator.enqueue(job)."""
        self._generator.enqueue(job)

    def cancel(self, job: Any) -> None:
        """generator.cancel(job): removes a pending job or frees an active job's cache pages."""
        self._generator.cancel(job)

    def iterate(self) -> list[dict[str, Any]]:
        """One generator step."""
        results: list[dict[str, Any]] = self._generator.iterate()
        return results

    def memory(self) -> dict[str, int]:
        """CUDA memory this process holds, summed over devices."""
        return cuda_memory(self._torch)

    def _unload(self) -> None:
        try:
            self._model.unload()
        except Exception:
            log.exception("model.unload failed")

    def close(self) -> None:
        """Drop the generator and unload the model."""
        self._generator = None
        self._unload()


class ExLlamaEngineBase:
    """Shared by ExLlamaV3Engine and ExLlamaV2Engine."""

    name: str
    model_format: ExllamaFormat

    def __init__(self, *, env: Environment | None = None, machine: Callable[[], Machine] | None = None) -> None:
        self._env = env or Environment()
        self._machine = machine or probed_machine

    def availability(self, machine: Machine) -> Availability:
        """Installed? Usable on this machine? If not, why, in words a user understands."""
        raise NotImplementedError

    def _parallel(self, machine: Machine, config: ServeConfig) -> int:
        """Jobs the generator may run at once (EXL2 without flash-attn: 1)."""
        return config.parallel

    def _build_backend(self, files: HfModelFiles, plan: CachePlan, config: ServeConfig) -> Backend:
        raise NotImplementedError

    def load(self, model: LocalModel, config: ServeConfig) -> ExLlamaModel:
        """Load the model folder with a cache sized by the advisor; raises ModelError/EngineError subclasses."""
        files = read_model_files(model.path, self.model_format)
        machine = self._machine()
        availability = self.availability(machine)
        if not availability.usable:
            raise EngineUnavailableError(f"{self.name} cannot run here: {availability.reason}")
        plan = plan_cache(
            machine,
            files,
            config,
            tensor_parallel_capable=get_spec(self.name).tensor_parallel,
            parallel=self._parallel(machine, config),
        )
        log.info(
            "%s: context %d x %d jobs -> %d cache tokens on %d GPU(s)%s",
            self.name,
            plan.context,
            plan.parallel,
            plan.cache_tokens,
            plan.gpu_count,
            " (tensor parallel)" if plan.tensor_parallel else "",
        )
        backend = self._build_backend(files, plan, config)
        try:
            info = model_info(model, files, plan, self.name, backend.version)
            return ExLlamaModel(backend, info, plan, max_queue=config.max_queue, special_tokens=files.added_tokens)
        except BaseException:
            backend.close()
            raise


def model_info(model: LocalModel, files: HfModelFiles, plan: CachePlan, engine: str, version: str) -> ModelInfo:
    """What the server needs to know, from the model's files and the cache plan."""
    return ModelInfo(
        id=model.name,
        engine=engine,
        engine_version=version,
        path=str(files.directory),
        format=files.format,
        architecture=files.architecture_name,
        context_length=plan.context,
        train_context_length=files.train_context,
        vocab_size=files.vocab_size,
        quant=model.quant or files.quant_label,
        chat_template=files.chat_template,
        bos_token=files.bos_token,
        eos_token=files.eos_token,
        eos_token_ids=files.eos_token_ids,
        add_bos_token=files.add_bos_token,
        can_embed=False,
        parallel=plan.parallel,
        extra={
            "cache_tokens": plan.cache_tokens,
            "tensor_parallel": plan.tensor_parallel,
            "gpus": plan.gpu_count,
            "bits_per_weight": files.bits_per_weight,
        },
    )
