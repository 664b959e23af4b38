"""`launcher pull`, `launcher models`, `launcher search` end to end against the fake Hub."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.hardware.recorded import load_recorded
from tests.catalog.helpers import exl3_config
from tests.fixtures.fake_hub import FakeHub

MB = 1024 * 1024


@pytest.fixture(autouse=True)
def recorded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI probes the machine; a recorded laptop keeps verdicts independent of the test host."""
    machine = load_recorded("cpu-avx2-laptop-16gb")
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", lambda: machine)


def test_pull_then_list_then_remove(fake_hub: FakeHub, tiny_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo("org/Tiny-GGUF", {"tiny-Q4_K_M.gguf": tiny_gguf.read_bytes()})
    assert main(["pull", "org/Tiny-GGUF"]) == 0
    out, err = capsys.readouterr()
    assert "Ready: org/Tiny-GGUF:Q4_K_M" in out and "launcher serve org/Tiny-GGUF:Q4_K_M" in out
    assert "100%" in err and "verifying" in err  # the progress bar

    assert main(["models", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    row = rows["org/Tiny-GGUF:Q4_K_M"]
    assert (row["source"], row["format"], row["quant"]) == ("hf-cache", "gguf", "Q4_K_M")
    assert row["architecture"]["layers"] == 2 and row["chat_template"] is True
    assert row["engine"] == "llamacpp"  # the engine registry says llama.cpp runs here
    assert "gemma-3-270m" in rows  # the starter is always listed

    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "org/Tiny-GGUF:Q4_K_M  [hf-cache] gguf Q4_K_M" in text and "2 layers, 4 heads (2 KV)" in text

    assert main(["models", "rm", "org/Tiny-GGUF:Q4_K_M"]) == 1  # not a terminal and no --yes: nothing happens
    assert "--yes" in capsys.readouterr().err
    assert main(["models", "rm", "org/Tiny-GGUF:Q4_K_M", "--yes"]) == 0
    assert "freed" in capsys.readouterr().out
    assert main(["models", "--json", "--no-engines"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["gemma-3-270m"]


def test_errors_are_one_clear_line_without_traceback(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo("meta/Gated", {"g-Q4_K_M.gguf": b"x" * 100}, gated=True)
    assert main(["pull", "meta/Gated"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("error: meta/Gated is gated") and "Traceback" not in err
    assert "%" not in err  # refused before any progress bar
    assert main(["pull", "org/Missing"]) == 1
    assert "No repo 'org/Missing'" in capsys.readouterr().err


def test_models_add_and_rm_never_touch_the_users_file(tiny_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "add", str(tiny_gguf), "--name", "mine"]) == 0
    assert "linked in place" in capsys.readouterr().out
    assert main(["models", "rm", "mine", "--yes"]) == 0
    assert "was not touched" in capsys.readouterr().out
    assert tiny_gguf.exists()


def test_models_add_of_a_non_gguf_names_the_file_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 10)
    assert main(["models", "add", str(fake)]) == 1
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: ") and "not a GGUF file" in message
    assert message.count(str(fake.resolve())) == 1 and not message.endswith("..")


def test_pull_dry_run_lists_the_files(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo("org/Split", {f"m-Q4_K_M-0000{i}-of-00002.gguf": b"s" * 10 for i in (1, 2)})
    assert main(["pull", "org/Split", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "m-Q4_K_M-00001-of-00002.gguf" in out and "m-Q4_K_M-00002-of-00002.gguf" in out
    assert fake_hub.served_for("m-Q4_K_M-00001-of-00002.gguf") == 0


def test_search_lists_quants_sizes_and_fit(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo(
        "unsloth/Qwen3-0.6B-GGUF",
        {"Qwen3-0.6B-Q4_K_M.gguf": os.urandom(MB), "Qwen3-0.6B-Q8_0.gguf": os.urandom(2 * MB)},
        tags=["gguf"],
        downloads=5000,
    )
    fake_hub.add_repo(
        "someone/Qwen3-Huge-GGUF",
        {f"huge-Q4_K_M-0000{i}-of-00002.gguf": b"h" * 1000 for i in (1, 2)},
        tags=["gguf"],
        downloads=10,
    )
    fake_hub.add_repo("mlx-community/Qwen3-0.6B-4bit", {"config.json": b"{}"}, tags=["mlx"], downloads=99)
    assert main(["search", "qwen3", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["repo_id"] for r in results] == ["unsloth/Qwen3-0.6B-GGUF", "someone/Qwen3-Huge-GGUF"]
    catalog, other = results
    assert catalog["catalog_id"] == "qwen3-0.6b" and not catalog["estimated"]
    assert [(v["quant"], v["size_bytes"]) for v in catalog["variants"]] == [("Q4_K_M", MB), ("Q8_0", 2 * MB)]
    assert all(v["verdict"] == "cpu" for v in catalog["variants"])  # a GPU-less laptop
    assert other["estimated"] and other["catalog_id"] is None
    [split] = other["variants"]
    assert split["quant"] == "Q4_K_M" and split["size_bytes"] == 2000 and len(split["files"]) == 2

    assert main(["search", "qwen3"]) == 0
    text = capsys.readouterr().out
    assert "unsloth/Qwen3-0.6B-GGUF  5,000 downloads, catalog: qwen3-0.6b" in text
    assert "* Q4_K_M" in text and "runs on the CPU" in text and "(estimated from size)" in text
    assert "pull: launcher pull unsloth/Qwen3-0.6B-GGUF --quant Q4_K_M" in text


def test_search_exl3_lists_branches(fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    fake_hub.add_repo("turboderp/Qwen3-0.6B-exl3", {"README.md": b"branches"}, tags=["exl3"])
    for bpw in ("4.0bpw", "6.0bpw"):
        files = {"config.json": exl3_config(float(bpw[:3])), "model.safetensors": os.urandom(MB)}
        fake_hub.add_repo("turboderp/Qwen3-0.6B-exl3", files, branch=bpw)
    assert main(["search", "qwen3", "--format", "exl3", "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert [(v["quant"], v["revision"], v["size_bytes"]) for v in result["variants"]] == [
        ("4.0bpw", "4.0bpw", MB),
        ("6.0bpw", "6.0bpw", MB),
    ]
    # The memory fit is the advisor's; that ExLlamaV3 cannot run on a GPU-less laptop is said beside it.
    assert all("exllamav3" in v["engine_note"] for v in result["variants"])


def test_interrupted_downloads_are_listed_and_can_be_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.core import paths

    blobs = paths.hf_cache_dir() / "models--org--Half" / "blobs"
    blobs.mkdir(parents=True)
    partial = blobs / f"{'a' * 64}.incomplete"
    partial.write_bytes(b"\0" * 2048)
    assert main(["models", "--no-engines"]) == 0
    assert "org/Half: 2.0 KiB" in capsys.readouterr().out
    assert main(["models", "rm", "--partial", "--yes"]) == 0
    assert "freed 2.0 KiB" in capsys.readouterr().out
    assert not partial.exists()
