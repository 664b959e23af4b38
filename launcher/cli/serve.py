"""`launcher serve MODEL`: serve a model on an OpenAI/Anthropic-compatible endpoint.

Flags are generated from `ServeConfig` fields (one flag per field), so the CLI, the settings
file and the app cannot drift. Precedence: ServeConfig defaults < settings `[serve]` (unless
`--no-settings`, as the app passes) < `--config FILE` `[serve]` < flags. The `--config` file's
`[models.NAME]` tables are presets (`core.config.ModelPreset`): models loaded by name on request,
with their own settings and aliases. When ready, one line goes to stdout:

    LAUNCHER_READY {"url": ..., "base_url": ..., "model": ..., "engine": ..., ...}

and on a start failure `LAUNCHER_ERROR {"kind": ..., "message": ...}` with a non-zero exit.
Human logs go to stderr.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, get_args, get_origin

from launcher.core.config import AUTO_ENGINE, ServeConfig
from launcher.engine_specs import names as engine_names

_SKIP = {"model", "presets"}


def _flag_type(annotation: Any) -> tuple[Any, list[str] | None, bool]:
    """(argparse type, choices, is_list) for a ServeConfig field annotation."""
    origin = get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _flag_type(inner[0])
    if origin is typing.Literal:
        return str, [str(a) for a in get_args(annotation)], False
    if origin is list:
        return str, None, True
    if annotation is bool:
        return bool, None, False
    return annotation, None, False


def _comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per ServeConfig field, plus MODEL and --config."""
    parser.add_argument(
        "model",
        nargs="?",
        default=argparse.SUPPRESS,
        help="GGUF path, catalog id or local-library name (default: the starter model)",
    )
    parser.add_argument(
        "--no-settings",
        dest="no_settings",
        action="store_true",
        help="ignore the settings file's [serve] table: only these flags and --config count "
        "(the app passes its whole configuration this way)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML file with a [serve] table of these settings and [models.NAME] tables: models loaded by "
        "name on request, each with its own settings and aliases",
    )
    for name, field in ServeConfig.model_fields.items():
        if name in _SKIP:
            continue
        flag = "--" + name.replace("_", "-")
        kind, choices, is_list = _flag_type(field.annotation)
        if name == "engine":
            choices = [AUTO_ENGINE, *engine_names()]  # the registry's: plug-ins and child engines too
        help_text = field.description or ""
        if field.default is not None and not is_list:
            help_text += f" [default: {field.default}]"
        if kind is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text
            )
        elif is_list:
            parser.add_argument(
                flag,
                dest=name,
                type=_comma_list,
                action="extend",
                default=argparse.SUPPRESS,
                help=help_text + " (comma-separated, or repeat the flag)",
            )
        else:
            parser.add_argument(flag, dest=name, type=kind, choices=choices, default=argparse.SUPPRESS, help=help_text)


def build_config(args: argparse.Namespace) -> ServeConfig:
    """Merge settings, the --config file and the flags into one validated ServeConfig."""
    import tomllib
    from pathlib import Path

    from pydantic import ValidationError

    from launcher.core import settings
    from launcher.core.errors import ConfigError

    # The app's child gets --no-settings: its flags are the app's whole form, and a field left at its
    # default there (no flag) must not fall back to an older value the settings file still holds.
    merged: dict[str, Any] = {} if args.no_settings else settings.load().serve.model_dump(exclude_unset=True)
    if args.config:
        path = Path(args.config).expanduser()
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"Cannot read config file {path}: {err}") from err
        models = data.pop("models", {})
        table = data.get("serve", data)
        if not isinstance(table, dict) or not isinstance(models, dict):
            raise ConfigError(f"{path}: [serve] and [models.NAME] must be tables.")
        merged.update(table)
        if models:
            merged["presets"] = models
    for name in ServeConfig.model_fields:
        if hasattr(args, name):
            merged[name] = getattr(args, name)
    try:
        config = ServeConfig.model_validate(merged)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"Invalid serve settings: {problems}") from err
    return config.model_copy(update={"api_key": api_key_of(config)})


def api_key_of(config: ServeConfig) -> str | None:
    """The key from --api-key, else the first line of --api-key-file, else $LAUNCHER_API_KEY."""
    import os
    from pathlib import Path

    from launcher.core.config import API_KEY_ENV
    from launcher.core.errors import ConfigError

    if config.api_key:
        return config.api_key
    if config.api_key_file:
        path = Path(config.api_key_file).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"Cannot read the API key file {path}: {err}") from err
        key = lines[0].strip() if lines else ""
        if not key:
            raise ConfigError(f"The API key file {path} is empty.")
        return key
    return os.environ.get(API_KEY_ENV, "").strip() or None


def run(args: argparse.Namespace) -> int:
    """Start the server; returns the exit code."""
    import json
    import sys

    from launcher.core.errors import LauncherError
    from launcher.core.server_records import ERROR_PREFIX

    try:
        from launcher.server.runner import serve

        return serve(build_config(args))
    except LauncherError as err:
        line = json.dumps({"kind": type(err).__name__, "message": str(err)})
        print(ERROR_PREFIX + line, flush=True)
        raise
    except Exception as err:  # still tell the app why, as a LAUNCHER_ERROR line
        line = json.dumps({"kind": type(err).__name__, "message": f"The server failed to start: {err}"})
        print(ERROR_PREFIX + line, flush=True)
        print(f"error: the server failed to start: {err}", file=sys.stderr)
        return 1
