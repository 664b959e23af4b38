"""The OpenAI Chat Completions and Completions API: its routes and request schemas."""
