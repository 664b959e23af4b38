"""The launcher: pick, download and serve local LLMs for coding agents."""

__version__ = "0.1.0"
