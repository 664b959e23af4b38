"""Other OpenAI-compatible servers this one passes requests to: registered remotes and child engines."""
