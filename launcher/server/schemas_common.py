"""What the three APIs' schemas share: lenient request parsing, the common request fields, and
response models whose JSON leaves out the keys a reply does not have.

Requests tolerate unknown fields (SDKs add new ones all the time); known fields with the wrong
type are a 400 in the caller's error shape. Responses are built from models, like the requests,
so a key is spelled once; `WireModel.wire()` gives the dict that goes on the wire.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from launcher.core.config import SpeculativeMode
from launcher.engines.base import SamplingParams
from launcher.server.errors import bad_request


class Lenient(BaseModel):
    """A request object: unknown fields are kept and ignored."""

    model_config = ConfigDict(extra="allow")


class OmitIfNone:
    """Field metadata (`Annotated[str | None, OMIT_IF_NONE]`): the key is left out of the JSON
    while the value is None. Fields without it are always sent, as null when None, because
    clients read some keys (OpenAI's `content`, `logprobs`) as present-and-null."""


OMIT_IF_NONE = OmitIfNone()


@functools.cache
def _omitted_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, info in model.model_fields.items() if OMIT_IF_NONE in info.metadata)


class WireModel(BaseModel):
    """A response body or stream event."""

    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in _omitted_fields(type(self)):
            if name in data and data[name] is None:
                del data[name]
        return data

    def wire(self) -> dict[str, Any]:
        """The JSON object as plain Python values (floats stay floats: -inf logprobs are written as
        the standard json module writes them, as before)."""
        return self.model_dump()


# The sampler knobs a request may declare; each API's request model declares those it accepts.
SAMPLING_KNOBS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "logit_bias",
)


class GenerationFields(Lenient):
    """The fields every generation request shares (chat, completions, messages, responses).

    `sampling()` reads only the knobs a request model declares, so a field one API does not
    define (min_p sent to /v1/messages, say) stays an ignored extra, as for any unknown field.
    """

    model: str = ""
    stream: bool = False
    # LM Studio's: unload this model after this many idle seconds (a load on demand keeps it that long)
    ttl: float | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    # The launcher's extension: speculative decoding for this request (auto, off, ngram); None follows the
    # server's --speculative. Never passed on to a remote or a vLLM/SGLang child (remote_request).
    speculative: SpeculativeMode | None = None

    def sampling(self) -> SamplingParams:
        """SamplingParams from the request (unset knobs keep the engine defaults)."""
        declared = type(self).model_fields
        knobs: dict[str, Any] = {name: getattr(self, name) for name in SAMPLING_KNOBS if name in declared}
        return _sampling_params(**knobs)


def _sampling_params(
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    repeat_penalty: float | None = None,
    logit_bias: dict[str, float] | None = None,
) -> SamplingParams:
    defaults = SamplingParams()
    bias: dict[int, float] = {}
    for key, value in (logit_bias or {}).items():
        try:
            bias[int(key)] = float(value)
        except ValueError:
            raise bad_request(f"logit_bias keys must be token ids, got {key!r}.", param="logit_bias") from None
    return SamplingParams(
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        top_k=defaults.top_k if top_k is None else top_k,
        min_p=defaults.min_p if min_p is None else min_p,
        seed=seed,
        presence_penalty=presence_penalty or 0.0,
        frequency_penalty=frequency_penalty or 0.0,
        repeat_penalty=defaults.repeat_penalty if repeat_penalty is None else repeat_penalty,
        logit_bias=bias,
    )
