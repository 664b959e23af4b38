"""ExLlamaV3 engine: EXL3 models on NVIDIA GPUs (compute capability >= 8.0). Verified only on a GPU."""
