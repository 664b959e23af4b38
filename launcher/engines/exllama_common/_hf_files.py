"""Read an EXL2/EXL3 model directory: config.json, tokenizer_config.json, generation_config.json.

Both converters keep the Hugging Face layout (safetensors + config.json + tokenizer files), and
record the quantization in config.json's `quantization_config` (`quant_method` "exl3"/"exl2",
`bits`): see exllamav3/conversion/compile.py and exllamav2/conversion/compile.py upstream.
The chat template is the HF tokenizer's own (tokenizer_config.json, or chat_template.jinja/.json
written by newer transformers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from launcher.core.errors import ModelFormatError
from launcher.engine_specs import engines_for_format

ExllamaFormat = Literal["exl2", "exl3"]


@dataclass(frozen=True)
class HfModelFiles:
    """The facts the server and the cache sizing need, read from the model's JSON files."""

    directory: Path
    format: ExllamaFormat
    architecture_name: str  # "LlamaForCausalLM"
    train_context: int
    vocab_size: int
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    eos_token_ids: tuple[int, ...]
    add_bos_token: bool
    bits_per_weight: float | None
    weights_bytes: int
    # tokenizer.json's added tokens by their text ("<|im_end|>", "<tool_call>", "[TOOL_CALLS]") -> id
    added_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def quant_label(self) -> str | None:
        """The quant as a label, e.g. 4.0bpw (None when unknown)."""
        return f"{self.bits_per_weight:.1f}bpw" if self.bits_per_weight else None


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{path} is not readable JSON: {err}") from err
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens either as strings or as AddedToken dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _chat_template(directory: Path, tokenizer_config: dict[str, Any]) -> str | None:
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str) and template.strip():
        return template
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    from_json = _json(directory / "chat_template.json").get("chat_template")
    return from_json if isinstance(from_json, str) else None


def _token_id(tokenizer_json: dict[str, Any], text: str | None) -> int | None:
    if text is None:
        return None
    for added in tokenizer_json.get("added_tokens", ()):
        if isinstance(added, dict) and added.get("content") == text and isinstance(added.get("id"), int):
            return int(added["id"])
    vocab = (tokenizer_json.get("model") or {}).get("vocab")
    if isinstance(vocab, dict) and isinstance(vocab.get(text), int):
        return int(vocab[text])
    return None


def read_model_files(directory: Path, expected: ExllamaFormat) -> HfModelFiles:
    """Read and check an EXL2/EXL3 directory; raises ModelFormatError saying what to do instead."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelFormatError(
            f"{directory} is not a folder. {expected.upper()} models are folders of safetensors files "
            "with a config.json (as produced by the ExLlama converters or downloaded from the Hub)."
        )
    config = _json(directory / "config.json")
    if not config:
        raise ModelFormatError(f"{directory} has no config.json, so it is not an {expected.upper()} model folder.")
    quant = config.get("quantization_config")
    quant = quant if isinstance(quant, dict) else {}
    method = str(quant.get("quant_method", "")).lower()
    if method != expected and not (expected == "exl2" and (directory / "measurement.json").exists()):
        found = method.upper() if method else "not quantized with ExLlama"
        engines = engines_for_format(method).all if method else ()
        hint = (
            f" Serve it with --engine {engines[0].name}."
            if engines
            else f" Convert it to {expected.upper()} first, or choose an {expected.upper()} repo."
        )
        raise ModelFormatError(f"{directory.name} is {found}, not {expected.upper()}.{hint}")
    weights = sum(p.stat().st_size for p in directory.glob("*.safetensors"))
    if weights == 0:
        raise ModelFormatError(f"{directory} has no .safetensors weights.")
    tokenizer_config = _json(directory / "tokenizer_config.json")
    tokenizer_json = _json(directory / "tokenizer.json")
    generation = _json(directory / "generation_config.json")
    text_config = config.get("text_config")
    numbers = {**config, **text_config} if isinstance(text_config, dict) else config
    bos = _token_text(tokenizer_config.get("bos_token"))
    eos = _token_text(tokenizer_config.get("eos_token"))
    # Chat models often end turns with a token other than the tokenizer's eos (Llama 3's <|eot_id|>);
    # generation_config.json lists every one, so generation stops on all of them.
    eos_ids = _ids(generation.get("eos_token_id")) + _ids(numbers.get("eos_token_id"))
    eos_from_text = _token_id(tokenizer_json, eos)
    if eos_from_text is not None:
        eos_ids.append(eos_from_text)
    bits = quant.get("bits")
    bits_per_weight = float(bits) if isinstance(bits, int | float) and not isinstance(bits, bool) else None
    architectures = config.get("architectures")
    name = architectures[0] if isinstance(architectures, list) and architectures else config.get("model_type", "?")
    vocab = numbers.get("vocab_size")
    return HfModelFiles(
        directory=directory,
        format=expected,
        architecture_name=str(name),
        train_context=int(numbers.get("max_position_embeddings") or 4096),
        vocab_size=int(vocab) if isinstance(vocab, int) else 0,
        chat_template=_chat_template(directory, tokenizer_config),
        bos_token=bos,
        eos_token=eos,
        eos_token_ids=tuple(sorted(set(eos_ids))),
        add_bos_token=bool(tokenizer_config.get("add_bos_token", False)),
        bits_per_weight=bits_per_weight,
        weights_bytes=weights,
        added_tokens={
            str(t["content"]): t["id"]
            for t in tokenizer_json.get("added_tokens", ())
            if isinstance(t, dict) and t.get("content") and isinstance(t.get("id"), int)
        },
    )
