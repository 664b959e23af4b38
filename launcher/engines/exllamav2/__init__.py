"""ExLlamaV2 engine: EXL2 models on NVIDIA GPUs (legacy; upstream is archived). Verified only on a GPU."""
