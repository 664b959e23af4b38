"""A tiny random-weight Llama in Hugging Face layout (config.json, safetensors, tokenizer.json).

Used by the CPU tests (with an EXL3/EXL2 `quantization_config` stamped on, so the engines
accept the folder while a stand-in runtime plays the GPU part), by scripts/gpu-check, which
converts the plain folder to real EXL3/EXL2 with the upstream converters, and by the real-vLLM
checks (tests/engines/real_vllm.py, scripts/check-vllm), which serve the plain folder. The
tokenizer is a real byte-level BPE trained with `tokenizers` on a few lines of text, with ChatML
special tokens and a tool-capable ChatML chat template, so prompts, chat templates and grammars
behave as with a real model.
Dimensions are multiples of 128 because the EXL3 quantizer works in 128-wide blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.fixtures.models import TINY_CHAT_TEMPLATE

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
TEXT = """\
The quick brown fox jumps over the lazy dog. Hello world! Hello there, how are you today?
You are a helpful assistant. The user asks a question and the assistant answers it.
Write a function that returns the sum of two numbers. def add(a, b): return a + b
Tool calls are JSON objects with a name and arguments. {"name": "get_weather", "arguments": {"city": "Paris"}}
The weather in Paris is sunny. The weather in London is rainy. What is the weather like? 0123456789
"""
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS = 256, 512, 2, 4, 2


def build_tokenizer_json() -> str:
    """A byte-level BPE tokenizer (tokenizer.json text) with ChatML and tool-call tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXT.splitlines(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return str(tokenizer.to_str())


def write_tiny_hf_model(directory: Path, *, quant_method: str | None = None, bits: float = 4.0, seed: int = 0) -> Path:
    """Write the model into `directory`; with `quant_method` ("exl3"/"exl2") config.json says it is quantized."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer_json = build_tokenizer_json()
    (directory / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    tokenizer = Tokenizer.from_str(tokenizer_json)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    padded_vocab = -(-vocab // 128) * 128
    eos_id = tokenizer.token_to_id("<|im_end|>")
    head_dim = HIDDEN // HEADS
    config: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": padded_vocab,
        "bos_token_id": tokenizer.token_to_id("<|endoftext|>"),
        "eos_token_id": eos_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "hidden_act": "silu",
    }
    if quant_method:
        config["quantization_config"] = {"quant_method": quant_method, "bits": bits}
    (directory / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos_id]}), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "add_bos_token": False,
                "chat_template": TINY_CHAT_TEMPLATE,
                "model_max_length": 4096,
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    tensors = {
        "model.embed_tokens.weight": weight(padded_vocab, HIDDEN),
        "lm_head.weight": weight(padded_vocab, HIDDEN),
    }
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float16)
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors[prefix + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float16)
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float16)
        tensors[prefix + "self_attn.q_proj.weight"] = weight(HEADS * head_dim, HIDDEN)
        tensors[prefix + "self_attn.k_proj.weight"] = weight(KV_HEADS * head_dim, HIDDEN)
        tensors[prefix + "self_attn.v_proj.weight"] = weight(KV_HEADS * head_dim, HIDDEN)
        tensors[prefix + "self_attn.o_proj.weight"] = weight(HIDDEN, HEADS * head_dim)
        tensors[prefix + "mlp.gate_proj.weight"] = weight(INTERMEDIATE, HIDDEN)
        tensors[prefix + "mlp.up_proj.weight"] = weight(INTERMEDIATE, HIDDEN)
        tensors[prefix + "mlp.down_proj.weight"] = weight(HIDDEN, INTERMEDIATE)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


if __name__ == "__main__":  # scripts/gpu-check, scripts/check-vllm: python -m tests.engines.exllama.tiny_hf OUT_DIR
    import sys

    print(write_tiny_hf_model(Path(sys.argv[1])))
