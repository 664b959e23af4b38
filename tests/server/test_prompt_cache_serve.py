"""The prompt cache on disk behind the real `launcher serve`: an agent's long prompt is read once, and a
restart or a model swap (`--max-models 1`: A, then B, then A) brings it back from disk.

Real server processes with the real llama.cpp engine on two tiny GGUFs; the reply after a restore must
be the reply after a cold read (temperature 0), and the usage the client reads says what was cached.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from launcher.engines import prompt_cache
from tests.conformance.servers import SERVERS, RunningServer, launch_serve
from tests.fixtures.models import write_tiny_gguf

LLAMACPP = next(spec for spec in SERVERS if spec.engine == "llamacpp")
SYSTEM = "You are a coding agent. Tools: read_file(path), run(command), edit(path, old, new). " * 24


def _serve(home: Path, *flags: str) -> RunningServer:
    argv = ["--port", "0", "--engine", "llamacpp", *LLAMACPP.extra_args, "--no-library", "--parallel", "2", *flags]
    return launch_serve(argv, home, "serve-prompt-cache")


def _turn(server: RunningServer, model: str, question: str) -> dict[str, object]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    body = {"model": model, "messages": messages, "max_tokens": 16, "temperature": 0}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


def _cached(answer: dict[str, object]) -> int:
    usage = answer["usage"]
    assert isinstance(usage, dict)
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def _prompt(answer: dict[str, object]) -> int:
    usage = answer["usage"]
    assert isinstance(usage, dict)
    return int(usage["prompt_tokens"])


def _text(answer: dict[str, object]) -> str:
    choices = answer["choices"]
    assert isinstance(choices, list)
    return str(choices[0]["message"]["content"])


def test_a_restarted_server_restores_the_agent_prompt_from_disk(tiny_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "prompts"
    server = _serve(tmp_path / "home", str(tiny_gguf), "--prompt-cache-dir", str(cache))
    try:
        cold = _turn(server, "m", "List the files.")
    finally:
        server.stop()  # SIGTERM: a clean stop, which waits for the cache's writes
    assert _cached(cold) == 0
    assert [entry.model for entry in prompt_cache.list_entries(cache)] == ["tiny-llama"]

    server = _serve(tmp_path / "home", str(tiny_gguf), "--prompt-cache-dir", str(cache))
    try:
        warm = _turn(server, "m", "List the files.")
    finally:
        server.stop()
    assert _cached(warm) == _prompt(warm) - 1  # all but the last token, read again for its logits
    assert _text(warm) == _text(cold)


def test_a_model_swapped_out_and_back_restores_its_prompt(tmp_path: Path) -> None:
    a = write_tiny_gguf(tmp_path / "tiny-a.gguf", seed=1)
    b = write_tiny_gguf(tmp_path / "tiny-b.gguf", seed=2)
    config = tmp_path / "models.toml"
    config.write_text(f'[models.a]\nmodel = "{a}"\n\n[models.b]\nmodel = "{b}"\n')
    cache = tmp_path / "prompts"
    server = _serve(tmp_path / "home", "--config", str(config), "--max-models", "1", "--prompt-cache-dir", str(cache))
    try:
        first = _turn(server, "a", "List the files.")
        other = _turn(server, "b", "List the files.")  # unloads a
        again = _turn(server, "a", "List the files.")  # unloads b, loads a: its prompt comes from disk
    finally:
        server.stop()
    assert _cached(first) == 0 and _cached(other) == 0
    assert _cached(again) == _prompt(again) - 1
    assert _text(again) == _text(first)
    assert len({entry.path.parent for entry in prompt_cache.list_entries(cache)}) == 2  # a folder per model


def test_a_new_session_of_a_sliding_window_model_restores_up_to_the_users_words(
    tiny_swa_gguf: Path, tmp_path: Path
) -> None:
    # As Claude Code sends it: system prompt and tools, a user message of reminders then the request,
    # then a long system message (the environment). Two sessions differ in the request only.
    reminder = "<system-reminder>Use the tools. Keep answers short.</system-reminder>\n"
    environment = "# Environment\nWorking directory: /work. Platform: linux. Shell: bash.\n" * 30

    def session(question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": reminder + question},
            {"role": "system", "content": environment},
        ]

    cache = tmp_path / "prompts"
    flags = ("--prompt-cache-dir", str(cache), "--context", "4096")
    answers = []
    for question in ("Create the file proof.txt, then say you are done.", "Now list the files in this folder."):
        server = _serve(tmp_path / "home", str(tiny_swa_gguf), *flags)
        try:
            body = {"model": "m", "messages": session(question), "max_tokens": 8, "temperature": 0}
            response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300)
            answers.append(response.json())
        finally:
            server.stop()
    first, second = answers
    assert _cached(first) == 0
    # The prompt is ~3,100 tokens: system 1,370, reminder 50, the request, the environment 1,650. The
    # engine's own checkpoints (4-4,100 tokens before the end) all lie past where the sessions part,
    # so without the server's hint nothing would be restored; with it, all up to the request's line.
    assert _cached(second) >= 1370 + 50
    assert _cached(second) < _prompt(second) - 1650
