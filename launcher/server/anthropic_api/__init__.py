"""The Anthropic Messages API: its routes, request schemas and stream rendering."""
