"""Engines that run as a child process: their own OpenAI-compatible server, started and supervised here.

The datacenter engines (vLLM, SGLang) and any plug-in declared with `runs_as="child"` bring a server of
their own, so the launcher does not load them behind `engines.base.Engine`: `launcher serve MODEL
--engine NAME` starts the engine's server as a supervised child on a free loopback port with a random
key of its own, the model pool waits for its /health (its load) and stops it as it closes, and requests
are passed to it as to an upstream (server/upstreams/remote_chat.py). Agents then see one server, with the
launcher's key, names and aliases, and its Anthropic Messages and Responses APIs translated to the Chat
Completions the child speaks.

- `command`: the one place a child's command line is built, from its spec's `ChildLaunch`;
- `process`: the running child (its output, its /health, its stop with its whole process group);
- `engine`: what the registry builds for a child spec (availability, the planned launch, the start);
- `handoff_words`: the words of the engines `launcher handoff` plans (vLLM, SGLang), from its tables.
"""
