"""`ServeConfig`: the one typed description of a server, shared by CLI flags, the config file and the app.

The CLI builds its `serve` flags from these fields, the settings file stores defaults under
`[serve]`, and the app turns its form into the same object and then into argv
(`to_argv`), so the three cannot drift.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from launcher.core.net import is_loopback_host
from launcher.core.units import parse_bytes

DEFAULT_PORT = 8420
"""The documented default port (chosen away from 8000/8080/11434/1234 that other tools take)."""

API_KEY_ENV = "LAUNCHER_API_KEY"
"""The environment variable `launcher serve` reads its API key from when no flag gives one (the app
passes its key this way, so the key never shows in the process list)."""

DEFAULT_SWA_CHECKPOINTS = 8
"""Sliding-window checkpoints llama.cpp keeps per slot (see `ServeConfig.swa_checkpoints`)."""
DEFAULT_SWA_CHECKPOINT_MB = 1024
"""Memory all of them may hold together, in MiB."""

AUTO_ENGINE = "auto"
"""`engine` for "the advisor's choice"; any other value names an engine in `launcher.engine_specs`."""


SpeculativeMode = Literal["auto", "off", "ngram", "draft"]
"""How an engine may speculate (launcher/engines/speculation.py): auto (n-gram drafts where the sequence's
own text repeats, the draft model's otherwise when one is loaded; each sequence drafting only while it
pays), off (one token per step), ngram (n-gram drafts only, always offered), draft (the draft model only)."""


class ServeConfig(BaseModel):
    """Everything `launcher serve` needs besides the model."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str = Field("", description="GGUF path, catalog id or local-library name (empty: the starter model)")
    # A name, not a closed list: engines come from the registry (plug-ins too), which sits above this
    # module; the server's plan rejects an unknown name with the list of known ones.
    engine: str = Field(
        AUTO_ENGINE,
        pattern=r"^[a-z][a-z0-9_]*$",
        description="inference engine (auto: the advisor's choice)",
    )
    context: int | None = Field(None, ge=256, description="context length in tokens (default: advisor)")
    parallel: int = Field(4, ge=1, le=64, description="concurrent sequences sharing the KV cache")
    gpu_layers: int | None = Field(None, ge=-1, description="layers offloaded to GPU (-1 all; default: advisor)")
    threads: int | None = Field(None, ge=1, description="CPU threads (default: physical cores)")
    host: str = Field("127.0.0.1", description="address to bind (non-loopback needs an API key)")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="port (0 picks a free one)")
    api_key: str | None = Field(
        None,
        description=f"require this key (Bearer or x-api-key); visible in the process list, so prefer "
        f"--api-key-file or ${API_KEY_ENV}",
    )
    api_key_file: str | None = Field(None, description="read the API key from the first line of this file")
    max_connections: int = Field(
        1024,
        ge=8,
        description="open connections at most; past it, connections that never sent a request are closed "
        "first, then new ones get a 503",
    )
    cors_origins: list[str] = Field(default_factory=list, description="allowed CORS origins (off when empty)")
    alias: list[str] = Field(
        default_factory=list,
        description=(
            "NAME (the model id clients see; default: the model's name) or NAME=MODEL (requests for NAME, "
            "which may use * wildcards, go to MODEL). Unmapped names such as claude-* and gpt-* "
            "are answered by the served model"
        ),
    )
    max_output_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "cap on the tokens of every reply, whatever the client asks; a reply it ends finishes as a normal "
            "stop, so agents do not ask to continue (small models ramble until the context is full)"
        ),
    )
    # Off is the way around a grammar problem (a schema the grammar gets wrong, a slow grammar on a huge
    # tool list) and the baseline of scripts/bench-tool-calls; forced calls (tool_choice required or
    # a named tool) keep their grammar either way, as a forced call without one could be anything.
    tool_call_grammar: Literal["lazy", "off"] = Field(
        "lazy",
        description=(
            "on tool_choice auto, the model writes freely until it starts a tool call, then only a well-formed "
            "call to one of the request's tools with valid arguments (lazy), or anything (off: a started call "
            "that does not parse reaches the client as text)"
        ),
    )
    log_requests: Literal["off", "on", "replies"] = Field(
        "on",
        description=(
            "one log line per request (status, agent, model, tokens, timings); `replies` adds the start of "
            "what the model wrote, to see why an agent misbehaves"
        ),
    )
    max_queue: int = Field(64, ge=0, description="requests waiting beyond `parallel` before 429")
    kv_cache_type: Literal["auto", "f16", "q8_0", "q4_0"] = Field(
        "auto",
        description="KV cache element type (auto: f16, or for llama.cpp q8_0 where f16 would not fit at the context)",
    )
    prefix_cache_tokens: int | None = Field(
        None, ge=0, description="tokens of idle KV kept for prefix reuse (default: whatever is free)"
    )
    # Sliding-window models (Gemma 3, gpt-oss, ...) keep only the window in those layers, so a
    # prefix that ends before the window can only be reused from a saved copy of the window
    # (a checkpoint). A request saves one 4 tokens before its prompt's end and, in a long prompt,
    # 64, 256, 1,024 and 4,096 tokens before that; one holds the window's K and V: 7.5 MB for the starter,
    # ~0.4 GB for Gemma 3 27B.
    swa_checkpoints: int = Field(
        DEFAULT_SWA_CHECKPOINTS,
        ge=0,
        le=64,
        description="llama.cpp: sliding-window checkpoints kept per slot for prefix reuse (0: none)",
    )
    swa_checkpoint_mb: int = Field(
        DEFAULT_SWA_CHECKPOINT_MB,
        ge=0,
        description="llama.cpp: memory all sliding-window checkpoints may hold together, in MiB",
    )
    # The disk tier under the prefix cache (launcher/engines/prompt_cache.py): an agent's 12k-token
    # system prompt costs 40-55 s to read on a 2-core CPU and a file read to restore.
    prompt_cache_gb: float | None = Field(
        None,
        ge=0,
        description="disk the prompt cache may use, in GiB: prompt prefixes kept across restarts, model swaps "
        "and sessions (default: a tenth of the free space, at most 20; 0: off)",
    )
    prompt_cache_dir: str | None = Field(
        None, description="folder of the prompt cache (default: prompt-cache in the app's data folder)"
    )
    # 500 ms: on a 2-core CPU with the starter, a 1,450-token prompt arriving next to 3 streams took
    # 4.9 s to its first token with max 0.6 s gaps in the others, vs 3.5-4.2 s and 1.2-1.8 s gaps
    # unchunked; 250 ms gave 0.35 s gaps but 5.9 s. GPUs read 512 tokens well under it anyway.
    prefill_stall_ms: int = Field(
        500,
        ge=0,
        le=60_000,
        description="llama.cpp: about how long running streams pause per step while a new prompt is read",
    )

    # Most of what a coding agent writes is already in its prompt (a file rewritten with a change, a diff's
    # context): drafts copied from the sequence's own text are verified in the same batched step.
    speculative: SpeculativeMode = Field(
        "auto",
        description="speculative decoding: auto (n-gram drafts from the prompt and output, the --draft model's where "
        "nothing repeats; each stream drafting only while it pays), ngram (n-gram drafts only), draft (the draft "
        "model only), off (one token per step); a request's `speculative` field overrides it",
    )
    draft: str | None = Field(
        None,
        description="a small model with the same vocabulary that drafts tokens for the served one (GGUF path, "
        "catalog id or library name; default: the advisor's pick when it is downloaded and fits)",
    )

    # Serving several models (see launcher/server/pool/model_pool.py): the library, presets, limits.
    # On by default, as LM Studio and Ollama load by name: a request naming a library model loads it
    # beside MODEL (or the starter) instead of being answered by it. Beside an engine that runs as a
    # child server it is off (the server's `serves_library`): such an engine runs its one model, and the
    # library's would need another.
    library: bool = Field(
        True,
        description="serve every model of the local library by its name too, each loaded on its first request "
        "(--no-library: only MODEL, or the presets, answer)",
    )
    max_models: int | None = Field(None, ge=1, description="models loaded at once at most (default: as many as fit)")
    ttl: int | None = Field(
        None,
        ge=1,
        description="unload a model idle this many seconds (default: keep it; a request's `ttl` sets its model's)",
    )
    swap_wait: int = Field(
        120,
        ge=1,
        description="seconds a request for a model that must replace a busy one (--max-models, the memory "
        "budget) waits for the busy one's requests to end, before a 503 with Retry-After; meanwhile the "
        "busy one takes no new requests",
    )
    memory_budget: str | None = Field(
        None,
        description="memory all loaded models may take together, e.g. 12GiB (default: what was free at the start)",
    )
    presets: dict[str, ModelPreset] = Field(
        default_factory=dict,
        description="named models with their own settings and aliases ([models.NAME] tables of --config)",
    )

    @field_validator("memory_budget")
    @classmethod
    def _budget_is_a_size(cls, value: str | None) -> str | None:
        if value is not None:
            parse_bytes(value)  # a ValueError names what is wrong
        return value

    @property
    def memory_budget_bytes(self) -> int | None:
        """--memory-budget in bytes."""
        return parse_bytes(self.memory_budget) if self.memory_budget else None

    @field_validator("alias", mode="before")
    @classmethod
    def _alias_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value  # `alias = "name"` in a settings file

    @field_validator("alias")
    @classmethod
    def _aliases_are_names(cls, value: list[str]) -> list[str]:
        for entry in value:
            name, _, target = entry.partition("=")
            if not name.strip() or ("=" in entry and not target.strip()):
                raise ValueError(f"alias {entry!r} is neither NAME nor NAME=MODEL")
        return [entry.strip() for entry in value]

    @property
    def served_name(self) -> str | None:
        """The id clients see for the served model (the first plain NAME alias), if one is set."""
        return next((entry for entry in self.alias if "=" not in entry), None)

    @property
    def alias_map(self) -> dict[str, str]:
        """NAME (or pattern) -> MODEL, from the NAME=MODEL aliases."""
        pairs = (entry.partition("=") for entry in self.alias if "=" in entry)
        return {name.strip(): target.strip() for name, _, target in pairs}

    @field_validator("host")
    @classmethod
    def _host_is_address_or_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("host must not be empty")
        return value.strip()

    @property
    def is_loopback(self) -> bool:
        """True when only this machine can reach the server."""
        return is_loopback_host(self.host)

    def to_argv(self) -> list[str]:
        """The `launcher serve` argument list equivalent to this config (used by the app)."""
        argv: list[str] = [self.model] if self.model else []
        defaults = ServeConfig()
        for name, field in ServeConfig.model_fields.items():
            if name in ("model", "api_key"):  # the key travels in the environment (to_environment)
                continue
            if name == "presets":  # tables, not a flag: they travel in a --config file
                continue
            value: Any = getattr(self, name)
            if value == getattr(defaults, name):
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):  # the CLI's switches take no value (argparse.BooleanOptionalAction)
                argv.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, list):
                if value:
                    argv += [flag, ",".join(value)]
            elif value is not None:
                argv += [flag, str(value)]
            del field
        return argv

    def to_environment(self) -> dict[str, str]:
        """Environment variables the `launcher serve` child needs besides `to_argv`: the API key."""
        return {API_KEY_ENV: self.api_key} if self.api_key else {}


PRESET_SETTINGS = frozenset(
    {
        "engine",
        "context",
        "parallel",
        "gpu_layers",
        "threads",
        "kv_cache_type",
        "max_output_tokens",
        "prefix_cache_tokens",
        "speculative",
        "draft",
    }
)
"""The ServeConfig fields a preset may set for its model alone (the rest belong to the server)."""


class ModelPreset(BaseModel):
    """A `[models.NAME]` table: which model NAME loads, with which settings, and which other names
    (agents' `claude-haiku-*`, `gpt-*`) reach it.

        [models.small]
        model = "smollm2-135m-instruct"   # library name, catalog id or path
        aliases = ["claude-haiku-*"]
        context = 8192
        ttl = 600                         # unload after 10 idle minutes

    Any `PRESET_SETTINGS` field may be set; a typo is an error, not silently ignored.
    """

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    ttl: int | None = Field(None, ge=1)
    default: bool = False  # answers the names no model or alias matches

    @model_validator(mode="after")
    def _settings_are_per_model(self) -> ModelPreset:
        settings = self.model_extra or {}
        unknown = sorted(set(settings) - PRESET_SETTINGS)
        if unknown:
            raise ValueError(
                f"unknown setting(s) {', '.join(unknown)}; a model may set {', '.join(sorted(PRESET_SETTINGS))}"
            )
        ServeConfig.model_validate(settings)  # the same types and ranges as the flags
        return self

    def config_for(self, server: ServeConfig) -> ServeConfig:
        """The server's config with this model and its own settings in place."""
        data = server.model_dump(exclude={"presets", "alias"}) | (self.model_extra or {}) | {"model": self.model}
        return ServeConfig.model_validate(data)


ServeConfig.model_rebuild()
