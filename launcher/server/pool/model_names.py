"""Which model a request's `model` field names.

Agents ask for the names they know: Claude Code for `claude-sonnet-*` and, for titles and
summaries, `claude-haiku-*`; Codex for `gpt-*`. A name is looked up as an exact model name, then
as an alias (exact aliases before `*` patterns, so `claude-haiku-4-5` can go to a small model
while `claude-*` goes to a big one), then falls to the default model if there is one: a server
started with `launcher serve MODEL` answers every name with MODEL, as llama-server does. A name
under a remote's prefix (`box/...`) never falls to the default: it asked for that remote, and a
typo there is a 404, not another model's answer.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.upstreams.remotes import Remotes, remote_entry


def alias_target(aliases: dict[str, str], name: str) -> str | None:
    """The model an alias maps `name` to (exact names before * patterns), or None."""
    if name in aliases:
        return aliases[name]
    return next((target for pattern, target in aliases.items() if fnmatch.fnmatchcase(name, pattern)), None)


@dataclass
class ModelNames:
    """The models a server can load, their aliases, and the default for names nothing matches."""

    entries: dict[str, ModelEntry]
    aliases: dict[str, str] = field(default_factory=dict)  # NAME or pattern -> entry name
    default: str | None = None
    remote_prefixes: tuple[str, ...] = ()  # the registered remotes' `NAME/`: names the default never answers

    def resolve(self, requested: str) -> ModelEntry | None:
        """The entry `requested` names, or None (then the server answers 404 with what it has)."""
        if requested in self.entries:
            return self.entries[requested]
        target = alias_target(self.aliases, requested)
        if target is not None:
            return self.entries.get(target)
        if requested.startswith(self.remote_prefixes) and self.remote_prefixes:
            return None  # a model of a remote that does not list it
        return self.entries.get(self.default) if self.default else None

    def knows(self, requested: str) -> bool:
        """True when `requested` is a model's name or an alias (not a name only the default answers)."""
        return requested in self.entries or alias_target(self.aliases, requested) is not None

    def aliases_of(self, name: str) -> list[str]:
        """The aliases that lead to `name`."""
        return [alias for alias, target in self.aliases.items() if target == name]

    @property
    def serves_one_model(self) -> bool:
        """True when one model answers every name and nothing else is served (no library, presets or
        remotes beside it): `launcher serve MODEL --no-library`, or an app built around one model."""
        return self.default is not None and set(self.entries) == {self.default}

    def add(self, entry: ModelEntry) -> None:
        """Make one more model loadable (a library model pulled after the server started)."""
        self.entries.setdefault(entry.name, entry)


def library_entry(config: ServeConfig, name: str) -> ModelEntry:
    """A library model, loadable by its name with the server's settings."""
    ttl = float(config.ttl) if config.ttl else None
    return ModelEntry(name, config.model_copy(update={"model": name, "presets": {}, "alias": []}), ttl, "library")


def server_names(
    config: ServeConfig,
    served: str | None,
    library: list[str],
    served_as: tuple[str, ...] = (),
    remotes: Remotes | None = None,
    same_files: dict[str, str] | None = None,
) -> ModelNames:
    """The names of a server started with `config`.

    `served` is the MODEL argument's name (None when the server only loads by name), `served_as`
    its other names (the model's own id under `--alias NAME`, the path it was given as); `library`
    the local library's model names (unless `--no-library`); `same_files` the library names of files
    the server already serves under another name (library name -> that name: the MODEL given by
    path or under `--alias NAME`, a preset), which become aliases so one file never loads twice;
    `remotes` the upstreams' models (`NAME/model`; `served` may be one of them). Presets
    (`[models.NAME]` tables) come with their aliases, and may name a remote model; `--alias
    NAME=MODEL` adds more. An alias to a model the server cannot load stops the start, instead of
    failing every request that uses it.
    """
    ttl = float(config.ttl) if config.ttl else None
    remotes = remotes or Remotes()
    entries: dict[str, ModelEntry] = {}
    for name in library:
        entries[name] = library_entry(config, name)
    for entry in remotes.entries(config):
        entries.setdefault(entry.name, entry)  # a library model of the same name stays local
    aliases: dict[str, str] = {}
    default = served
    for name, preset in config.presets.items():
        preset_ttl = float(preset.ttl) if preset.ttl else ttl
        remote = remotes.named(preset.model)
        if remote is not None:  # a preset may give a remote model another name and its own limits
            entries[name] = remote_entry(preset.config_for(config), remote, name, origin="preset")
        else:
            entries[name] = ModelEntry(name, preset.config_for(config), preset_ttl, "preset")
        aliases.update({alias: name for alias in preset.aliases})
        if preset.default:
            default = name
    if served is not None:
        remote = remotes.named(served)
        if remote is not None:
            entries[served] = remote_entry(config, remote, served)
        else:
            entries[served] = ModelEntry(served, config.model_copy(update={"presets": {}}), ttl, "served")
    for alias, target in config.alias_map.items():
        aliases[alias] = served if served is not None and target in served_as else target
        remote = remotes.named(target) if target not in entries else None
        if remote is not None:  # an alias to a remote model its remote did not list (yet)
            entries[target] = remote_entry(config, remote)
    for name, target in (same_files or {}).items():
        aliases.setdefault(name, target)  # an alias the user gave wins
    prefixes = tuple(upstream.prefix for upstream in remotes.upstreams.values() if upstream.prefix)
    names = ModelNames(entries, aliases, default, prefixes)
    for alias, target in names.aliases.items():
        if target not in entries:
            known = ", ".join(sorted(entries)) or "none"
            what = f"this server serves one model, {default!r}" if names.serves_one_model else f"it loads {known}"
            raise ConfigError(f"The alias {alias} points at {target!r}, which this server does not serve: {what}.")
    return names
