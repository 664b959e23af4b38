"""Typed catalog entries (the data lives in launcher/resources/catalog/models.toml).

Each entry carries the architecture numbers the advisor needs and, per format, where the
weights live on the Hugging Face Hub.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from launcher.core.model_types import Architecture

FormatName = Literal["gguf", "mlx", "exl2", "exl3"]
SafetensorsQuant = Literal["fp8", "awq", "mxfp4"]
"""Pre-quantized safetensors checkpoints the datacenter engines (vLLM, SGLang) load; BF16 is the upstream repo."""

# llama.cpp's file types (`llama-quantize --help`, gguf-py LlamaFileType), the names quant repos
# use in file names. Unsloth's dynamic quants prefix them with "UD-" (UD-Q4_K_XL is Q4_K_M-like
# with some tensors kept wider), so that prefix is accepted in front of any of these.
GGUF_QUANT_TYPES: frozenset[str] = frozenset(
    {
        "F32", "F16", "BF16",
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
        "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
        "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
        "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
        "MXFP4",
    }
)  # fmt: skip

# "-00001-of-00003.gguf": llama.cpp's gguf-split naming; the loader finds the rest from shard 1.
SPLIT_SHARD = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
MLX_VARIANT = re.compile(r"^\d+bit$")  # mlx-community style: "4bit", "8bit"
EXL_VARIANT = re.compile(r"^\d+(\.\d{1,2})?bpw$")  # branch names: "4.0bpw" (turboderp), "4.00bpw" (newer)
HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DRAFT_VOCAB_TOLERANCE = 128
"""How many tokens a draft's vocabulary may differ from its target's: llama.cpp's speculative check
(common/speculative.cpp, SPEC_VOCAB_MAX_SIZE_DIFFERENCE) accepts up to this, the rest of the tokens
matching by text. Qwen2.5's 7B+ configs pad the vocabulary to 152064, the 0.5B keeps 151936."""
DRAFT_MIN_CONTEXT = 32768
"""A draft must read as much context as the model serves by default (the advisor's largest rung, 32k)."""


def is_gguf_quant_name(name: str) -> bool:
    """True for a llama.cpp quant type name, optionally with Unsloth's "UD-" prefix."""
    return name.removeprefix("UD-") in GGUF_QUANT_TYPES


def _check_repo(repo: str) -> str:
    if not HUB_REPO.match(repo):
        raise ValueError(f"{repo!r} is not a Hugging Face repo id (owner/name)")
    return repo


class GgufQuant(BaseModel):
    """One GGUF quant: a single file or split shards (-00001-of-0000N)."""

    model_config = ConfigDict(extra="forbid")

    files: list[str] = Field(min_length=1)
    size_bytes: int | None = Field(None, gt=0, description="sum of the files, when recorded")

    @model_validator(mode="after")
    def _files_consistent(self) -> GgufQuant:
        if any(not f.endswith(".gguf") for f in self.files):
            raise ValueError(f"GGUF files must end in .gguf: {self.files}")
        shards = [SPLIT_SHARD.match(f.rsplit("/", 1)[-1]) for f in self.files]
        if not any(shards):
            if len(self.files) != 1:
                raise ValueError(f"several files but no -0000i-of-0000N shard names: {self.files}")
            return self
        if not all(shards):
            raise ValueError(f"split GGUF mixes shard and non-shard names: {self.files}")
        # A partial shard list would download fine and then fail to load: check it is complete.
        count = len(self.files)
        for position, (name, match) in enumerate(zip(self.files, shards, strict=True), start=1):
            assert match is not None
            if int(match["count"]) != count or int(match["index"]) != position:
                raise ValueError(
                    f"split GGUF shards must be listed 1..{count} of {count} in order; got {name!r} "
                    f"at position {position}"
                )
        stems = {
            (name.rpartition("/")[0], match["stem"]) for name, match in zip(self.files, shards, strict=True) if match
        }
        if len(stems) != 1:
            raise ValueError(f"split GGUF shards belong to different files: {self.files}")
        return self

    @property
    def is_split(self) -> bool:
        """True when the quant is stored as gguf-split shards (load the first one)."""
        return len(self.files) > 1

    @property
    def first_file(self) -> str:
        """The file to hand to llama.cpp (shard 1 of a split)."""
        return self.files[0]


class GgufSource(BaseModel):
    """A GGUF repo and its quant variants."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str = "main"
    quants: dict[str, GgufQuant] = Field(min_length=1)

    _repo = field_validator("repo")(_check_repo)

    @field_validator("quants")
    @classmethod
    def _quant_names(cls, quants: dict[str, GgufQuant]) -> dict[str, GgufQuant]:
        unknown = [name for name in quants if not is_gguf_quant_name(name)]
        if unknown:
            raise ValueError(f"unknown llama.cpp quant type(s) {unknown}; expected e.g. Q4_K_M, Q8_0")
        for name, quant in quants.items():
            # The quant name must appear in its files, or the entry points at the wrong file.
            if any(name.removeprefix("UD-").lower() not in f.lower() for f in quant.files):
                raise ValueError(f"quant {name} lists files that do not carry its name: {quant.files}")
        return quants


class MlxVariant(BaseModel):
    """An MLX repo at one bit width (mlx-community style)."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str = "main"
    size_bytes: int | None = Field(None, gt=0)

    _repo = field_validator("repo")(_check_repo)


class ExlVariant(BaseModel):
    """An EXL2/EXL3 quant: a repo and the branch (revision) holding one bits-per-weight."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str
    size_bytes: int | None = Field(None, gt=0)

    _repo = field_validator("repo")(_check_repo)


class SafetensorsVariant(BaseModel):
    """A pre-quantized safetensors repo for vLLM and SGLang (`launcher handoff`); the launcher never loads it."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str = "main"
    size_bytes: int | None = Field(None, gt=0)

    _repo = field_validator("repo")(_check_repo)


class CatalogModel(BaseModel):
    """One model people run locally."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    family: str = Field(description="chat/tool-call family: qwen3, qwen2.5, llama3, gemma3, mistral, gpt-oss, phi4")
    description: str
    tags: list[str] = Field(default_factory=list)
    license: str
    gated: bool = Field(False, description="the weights this entry points at need a Hub login / licence acceptance")
    upstream_repo: str = Field(description="the original (unquantized) Hugging Face repo")
    upstream_gated: bool = Field(False, description="the upstream repo is gated (Llama, Gemma)")
    architecture: Architecture
    gguf: GgufSource | None = None
    mlx: dict[str, MlxVariant] = Field(default_factory=dict, description="bit width ('4bit') -> repo")
    exl3: dict[str, ExlVariant] = Field(default_factory=dict, description="bpw ('4.0bpw') -> repo+revision")
    exl2: dict[str, ExlVariant] = Field(default_factory=dict)
    safetensors: dict[SafetensorsQuant, SafetensorsVariant] = Field(
        default_factory=dict, description="fp8/awq/mxfp4 -> repo for vLLM and SGLang (the hand-off)"
    )
    starter: bool = Field(False, description="the embedded default shipped on PyPI")
    draft: str | None = Field(
        None,
        description="catalog id of a smaller model of the same family and vocabulary that drafts tokens for this "
        "one (speculative decoding); checked against the whole catalog",
    )

    _upstream = field_validator("upstream_repo")(_check_repo)

    @field_validator("mlx")
    @classmethod
    def _mlx_keys(cls, variants: dict[str, MlxVariant]) -> dict[str, MlxVariant]:
        bad = [key for key in variants if not MLX_VARIANT.match(key)]
        if bad:
            raise ValueError(f"MLX variant keys must look like '4bit' or '8bit', not {bad}")
        return variants

    @field_validator("exl2", "exl3")
    @classmethod
    def _exl_keys(cls, variants: dict[str, ExlVariant]) -> dict[str, ExlVariant]:
        bad = [key for key in variants if not EXL_VARIANT.match(key)]
        if bad:
            raise ValueError(f"EXL variant keys must look like '4.0bpw', not {bad}")
        return variants

    @model_validator(mode="after")
    def _has_weights(self) -> CatalogModel:
        if not self.formats():
            raise ValueError(f"catalog entry {self.id!r} lists no weights (gguf, mlx, exl2 or exl3)")
        return self

    def formats(self) -> list[FormatName]:
        """Formats this entry has weights for."""
        out: list[FormatName] = []
        if self.gguf:
            out.append("gguf")
        if self.mlx:
            out.append("mlx")
        if self.exl3:
            out.append("exl3")
        if self.exl2:
            out.append("exl2")
        return out

    def quants(self, fmt: FormatName) -> list[str]:
        """Quant names available in one format."""
        if fmt == "gguf":
            return list(self.gguf.quants) if self.gguf else []
        variants: dict[str, dict[str, MlxVariant] | dict[str, ExlVariant]] = {
            "mlx": self.mlx,
            "exl3": self.exl3,
            "exl2": self.exl2,
        }
        return list(variants[fmt])


class Catalog(BaseModel):
    """The whole catalog file."""

    model_config = ConfigDict(extra="forbid")

    models: list[CatalogModel]

    @model_validator(mode="after")
    def _unique_ids(self) -> Catalog:
        ids = [m.id for m in self.models]
        dupes = {i for i in ids if ids.count(i) > 1}
        if dupes:
            raise ValueError(f"duplicate catalog ids: {sorted(dupes)}")
        if sum(m.starter for m in self.models) != 1:
            raise ValueError("exactly one catalog entry must be the starter model")
        problems = [problem for m in self.models if (problem := self._draft_problem(m))]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _draft_problem(self, model: CatalogModel) -> str | None:
        """Why `model`'s draft cannot draft for it (None when it can, or it names none)."""
        if model.draft is None:
            return None
        draft = self.get(model.draft)
        where = f"model {model.id!r}: draft {model.draft!r}"
        if draft is None:
            return f"{where} is not a catalog id"
        if draft.id == model.id:
            return f"{where} is the model itself"
        if draft.family != model.family:
            return f"{where} is family {draft.family!r}, not {model.family!r}: a draft needs the same tokenizer"
        if draft.architecture.params_total_b >= model.architecture.params_total_b:
            return (
                f"{where} ({draft.architecture.params_total_b:g}B) is not smaller than the model "
                f"({model.architecture.params_total_b:g}B)"
            )
        ours, theirs = model.architecture.vocab_size, draft.architecture.vocab_size
        if ours is None or theirs is None:
            return f"{where}: both entries must record vocab_size so the vocabularies can be compared"
        if abs(ours - theirs) > DRAFT_VOCAB_TOLERANCE:
            return f"{where} has a vocabulary of {theirs} tokens, the model {ours}: not the same tokenizer"
        if draft.gguf is None:
            return f"{where} has no GGUF weights (llama.cpp runs the draft)"
        needed = min(model.architecture.max_context, DRAFT_MIN_CONTEXT)
        if draft.architecture.max_context < needed:
            return f"{where} handles {draft.architecture.max_context} tokens of context, the model needs {needed}"
        return None

    def draft_for(self, model_id: str) -> CatalogModel | None:
        """The catalog entry that drafts tokens for `model_id` (speculative decoding), or None."""
        model = self.get(model_id)
        return self.get(model.draft) if model is not None and model.draft else None

    def get(self, model_id: str) -> CatalogModel | None:
        """The entry with this id, or None."""
        return next((m for m in self.models if m.id == model_id), None)

    @property
    def starter(self) -> CatalogModel:
        """The embedded default model."""
        return next(m for m in self.models if m.starter)
