"""Benchmarking OpenAI-compatible servers the way DOMAIN.md section 5 asks (`launcher bench`)."""
