"""`core.errors.in_context`: the one join of a context and a wrapped message, as users read it."""

from __future__ import annotations

from pathlib import Path

from launcher.core.errors import in_context


def test_a_phrase_gets_its_context_and_one_period() -> None:
    assert in_context("/m/x.gguf", "only 1 of 3 shards are on disk") == "/m/x.gguf: only 1 of 3 shards are on disk."


def test_a_sentence_keeps_its_own_final_period() -> None:
    assert in_context("The request cannot run", "The grammar is invalid.") == (
        "The request cannot run: The grammar is invalid."
    )
    assert in_context("Stopped", "really?") == "Stopped: really?"


def test_a_path_the_message_names_is_not_said_again() -> None:
    path = Path("/m/x.gguf")
    message = "/m/x.gguf is not a GGUF file (no GGUF magic at the start)."
    assert in_context(str(path), message, subject=path) == message
    assert in_context(f"Cannot add {path}", message, subject=path) == f"Cannot add: {message}"


def test_a_path_the_message_does_not_name_stays() -> None:
    path = Path("/m/x.gguf")
    assert in_context(f"Cannot add {path}", "config.json missing", subject=path) == (
        "Cannot add /m/x.gguf: config.json missing."
    )
