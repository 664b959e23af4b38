"""The Chat page's non-Qt side: conversations on disk, the MCP servers whose tools the model may call, and the
tool loop that talks to the served model."""
