"""The MLX engine: mlx-community models through mlx-lm (Metal on Apple Silicon; CPU build elsewhere, for tests)."""
