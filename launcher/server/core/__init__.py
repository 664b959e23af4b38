"""What every protocol shares: the chat template, generation, tool calls, reasoning and the result they make."""
