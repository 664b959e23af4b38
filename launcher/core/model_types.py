"""The model types every layer shares: what a model on disk is, and the numbers its memory and speed math need.

They sit at the bottom so the catalog, the advisor, the engines and the server can all speak of a
model without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ModelFormat = Literal["gguf", "mlx", "exl2", "exl3", "safetensors"]
"""How a model's weights are stored: one GGUF file, or a directory of MLX, EXL2, EXL3 or plain safetensors."""


@dataclass(frozen=True)
class LocalModel:
    """A model on disk, as the engine is asked to load it."""

    path: Path  # a .gguf file (first shard for split GGUFs) or a model directory
    format: ModelFormat
    name: str  # the default model id clients see
    quant: str | None = None  # "Q4_K_M", "4bit", "4.0bpw"
    catalog_id: str | None = None


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
    vocab_size: int | None = Field(None, gt=0, description="tokens in the vocabulary (sizes the logits buffer)")
    experts: int | None = Field(None, gt=0, description="routed experts per MoE layer")
    experts_active: int | None = Field(None, gt=0, description="experts each token is routed to")

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        if self.params_active_b > self.params_total_b:
            raise ValueError(
                f"params_active_b ({self.params_active_b}) cannot exceed params_total_b ({self.params_total_b})"
            )
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads ({self.attention_heads}) must be a multiple of "
                f"kv_heads ({self.kv_heads}) (grouped-query attention)"
            )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError("sliding_window must be positive (or absent)")
        if self.full_attention_layers is not None:
            if self.sliding_window is None:
                raise ValueError("full_attention_layers needs sliding_window")
            if not 0 <= self.full_attention_layers <= self.layers:
                raise ValueError("full_attention_layers must be within 0..layers")
        if (self.experts is None) != (self.experts_active is None):
            raise ValueError("experts and experts_active go together")
        # Only structural rules here: GgufMetadata.to_architecture() builds this from arbitrary files too.
        # Catalog-data expectations (MoE active << total, dense active == total) live in the data tests.
        if self.experts is not None and self.experts_active is not None and self.experts_active > self.experts:
            raise ValueError(f"experts_active ({self.experts_active}) cannot exceed experts ({self.experts})")
        return self

    @property
    def is_moe(self) -> bool:
        """True for mixture-of-experts models."""
        return self.experts is not None
