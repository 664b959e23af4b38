"""The OpenAI Responses API: its routes, request schemas and stream rendering."""
