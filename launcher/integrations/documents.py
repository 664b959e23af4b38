"""Agent config documents in their own formats (JSON, TOML, YAML): one renderer for the preview a
user copies and for the file the writer saves, and one parser for the files users already have."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from launcher.core.errors import ConfigError

ConfigFormat = Literal["json", "toml", "yaml"]


def render_document(data: dict[str, Any], fmt: ConfigFormat) -> str:
    """Serialize a document in the agent's format."""
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "toml":
        import tomli_w

        return tomli_w.dumps(data)
    import yaml

    text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return text


def parse_document(text: str, fmt: ConfigFormat, path: Path) -> dict[str, Any]:
    """Parse a config file's text; ConfigError (naming the file) when it is not valid."""
    if not text.strip():
        return {}
    try:
        if fmt == "json":
            data: Any = json.loads(text)
        elif fmt == "toml":
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as err:  # each parser raises its own error type; all mean the same to the user
        raise ConfigError(
            f"{path} is not valid {fmt.upper()} ({err}); fix or move it, then try again. Nothing was changed."
        ) from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a {fmt.upper()} object at the top level; nothing was changed.")
    return data
