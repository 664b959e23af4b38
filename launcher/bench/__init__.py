"""Benchmarking OpenAI-compatible servers as docs/benchmarks.md describes (`launcher bench`)."""
