"""The words of a child engine `launcher handoff` plans (vLLM, SGLang), from the hand-off's tables.

A catalog id is served as `launcher handoff` plans it for this machine: the checkpoint, tensor
parallelism, context, memory fraction and the family's tool-call and reasoning parsers. A model
folder or Hub repo the catalog does not plan is served with the engine's defaults and, when its
family is known, its tool-call parser (agents send tools with every request).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.core.errors import CatalogError
from launcher.engine_specs.child import ChildArguments, ChildRequest
from launcher.engines.child.command import flag_set

if TYPE_CHECKING:
    from launcher.advisor.handoff_engines import HandoffEngine
    from launcher.catalog.schema import CatalogModel
    from launcher.hardware.machine import Machine

# A local model folder's config.json `model_type` -> the catalog family the engines' parsers are listed under.
_FAMILIES = {
    "qwen2": "qwen2.5",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "llama": "llama3",
    "mistral": "mistral",
    "gpt_oss": "gpt-oss",
}


def handoff_arguments(engine: HandoffEngine, request: ChildRequest) -> ChildArguments:
    """`engine`'s words for `request`: the hand-off's plan for a catalog id, its defaults otherwise."""
    catalog_model = _catalog_model(request.model)
    if catalog_model is not None:
        name = request.served_name or catalog_model.id
        words = _planned_words(engine, catalog_model, request.port, request.api_key, request.machine)
        words = flag_set(words, "--served-model-name", name)
    else:
        name = request.served_name or Path(request.model.rstrip("/")).name or request.model
        words = _plain_words(engine, request.model, name, request.port)
    return ChildArguments(words, name, engine.context)


def _catalog_model(model: str) -> CatalogModel | None:
    from launcher.catalog.catalog import find

    try:
        return find(model)
    except CatalogError:
        return None


def _family(model: str) -> str | None:
    """The chat family of a model folder (its config.json) or a Hub repo the catalog lists."""
    folder = Path(model).expanduser()
    config = folder / "config.json"
    if config.is_file():
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return _folder_family(folder, str(json.loads(config.read_text(encoding="utf-8")).get("model_type")))
        return None
    from launcher.catalog.catalog import default_catalog

    for entry in default_catalog().models:
        repos = {entry.upstream_repo, *(variant.repo for variant in entry.safetensors.values())}
        if model in repos:
            return entry.family
    return None


def _chat_template(folder: Path) -> str:
    """The folder's chat template text ("" when it has none)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    tokenizer_config = folder / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return ""
    template = json.loads(tokenizer_config.read_text(encoding="utf-8")).get("chat_template") or ""
    if isinstance(template, list):  # named templates: [{"name": "default", "template": "..."}, ...]
        return "\n".join(str(item.get("template", "")) for item in template if isinstance(item, dict))
    return str(template)


def _folder_family(folder: Path, model_type: str) -> str | None:
    """The parser family of a model folder, from what its chat template writes for a tool call.

    The architecture alone misleads: a Llama fine-tune with a ChatML template calls tools in
    `<tool_call>` tags, and vLLM refuses to start its llama3_json parser on a tokenizer without
    Llama 3's `<|python_tag|>`.
    """
    template = _chat_template(folder)
    if "<tool_call>" in template:
        return "qwen3"  # Hermes-style calls: the Qwen family's parser reads them
    family = _FAMILIES.get(model_type)
    if family == "llama3" and "<|python_tag|>" not in template:
        return None
    return family


def _planned_words(
    engine: HandoffEngine, model: CatalogModel, port: int, api_key: str, machine: Machine | None
) -> list[str]:
    """The hand-off's plan for this machine (weights, tensor parallel, context, memory, parsers)."""
    from launcher.advisor.handoff import plan_handoff
    from launcher.advisor.handoff_sizing import Node

    if machine is None:
        from launcher.hardware.probe import probe_machine

        machine = probe_machine()
    deployment = plan_handoff(engine.name, model, Node.of(machine), api_key=api_key, nodes=1, port=port)
    return deployment.arguments(api_key=api_key)


def _plain_words(engine: HandoffEngine, model: str, served_name: str, port: int) -> list[str]:
    """A folder or Hub repo the catalog does not plan: the engine's defaults, and its family's parsers."""
    path = Path(model).expanduser()
    source = str(path.resolve()) if path.exists() else model
    words = [source] if engine.model_flag is None else [engine.model_flag, source]
    words += ["--served-model-name", served_name, "--port", str(port)]
    parser = engine.tool_parsers.get(_family(model) or "")
    if parser:
        words += ["--enable-auto-tool-choice"] if engine.auto_tool_choice else []
        words += ["--tool-call-parser", parser]
    return words
