"""Pulls through the real huggingface_hub client against the local fake Hub."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import hf_hub_download

from launcher.advisor.download_advice import advised_variant
from launcher.catalog import library
from launcher.catalog.download import pull
from launcher.catalog.progress import ProgressEvent
from launcher.catalog.pull_plan import plan_pull
from launcher.core import paths
from launcher.core.errors import (
    ChecksumError,
    ConfigError,
    DiskFullError,
    DownloadCancelled,
    GatedRepoError,
    OfflineError,
    RepoNotFoundError,
)
from tests.catalog.helpers import mlx_config
from tests.fixtures.fake_hub import VALID_TOKEN, FakeHub

MB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll until `condition` holds (fails the test after `timeout`, which only guards a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def storage_dir(repo_id: str) -> Path:
    return paths.hf_cache_dir() / f"models--{repo_id.replace('/', '--')}"


def test_pull_default_quant_lands_in_the_hf_cache_and_other_tools_see_it(fake_hub: FakeHub) -> None:
    q4 = os.urandom(3 * MB)
    fake_hub.add_repo("org/Tiny-GGUF", {"tiny-Q4_K_M.gguf": q4, "tiny-Q8_0.gguf": os.urandom(MB), "README.md": b"hi"})
    events: list[ProgressEvent] = []
    model = pull(plan_pull("org/Tiny-GGUF"), progress=events.append)
    assert model.path.read_bytes() == q4
    assert (model.format, model.quant, model.name) == ("gguf", "Q4_K_M", "org/Tiny-GGUF:Q4_K_M")
    assert fake_hub.served_for("tiny-Q8_0.gguf") == 0  # only the chosen variant came down
    # huggingface_hub itself finds the file offline: the cache layout is its own.
    found = hf_hub_download("org/Tiny-GGUF", "tiny-Q4_K_M.gguf", cache_dir=paths.hf_cache_dir(), local_files_only=True)
    assert Path(found) == model.path
    assert events[0].kind == "start" and events[-1].kind == "done"
    assert "verify" in {e.kind for e in events}
    assert events[-1].bytes_done == events[-1].bytes_total == len(q4)
    names = [e.name for e in library.scan_hf_cache()]
    assert names == ["org/Tiny-GGUF:Q4_K_M"]


def test_several_quants_and_no_default_asks_for_one(fake_hub: FakeHub) -> None:
    fake_hub.add_repo("org/Two", {"m-Q8_0.gguf": b"a" * 2000, "m-Q6_K.gguf": b"b" * 1000})
    with pytest.raises(ConfigError, match=r"--quant: Q6_K \(1000 B\), Q8_0"):
        plan_pull("org/Two")
    assert plan_pull("org/Two", quant="q6_k").files[0].path == "m-Q6_K.gguf"
    assert plan_pull("org/Two:m-Q8_0.gguf").files[0].path == "m-Q8_0.gguf"


def test_connection_dropped_mid_file_resumes_with_a_range_request(fake_hub: FakeHub) -> None:
    data = os.urandom(24 * MB)
    files = fake_hub.add_repo("org/Drop", {"drop-Q4_K_M.gguf": data})
    files["drop-Q4_K_M.gguf"].drop_after = 15 * MB
    model = pull(plan_pull("org/Drop"))
    assert model.path.read_bytes() == data
    ranges = [h.get("range") or h.get("Range") for m, p, h in fake_hub.requests if p.startswith("/cdn/")]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")
    assert fake_hub.served_for("drop-Q4_K_M.gguf") < 2 * len(data)  # not restarted from zero


def test_killed_process_resumes_from_the_partial_file(fake_hub: FakeHub) -> None:
    data = os.urandom(24 * MB)
    files = fake_hub.add_repo("org/Kill", {"kill-Q4_K_M.gguf": data})
    files["kill-Q4_K_M.gguf"].hold_after = 16 * MB  # the transfer stalls here until released
    script = "from launcher.cli import main; raise SystemExit(main(['pull', 'org/Kill']))"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.DEVNULL)
    partial = storage_dir("org/Kill") / "blobs" / f"{files['kill-Q4_K_M.gguf'].sha256}.incomplete"
    try:
        wait_until(lambda: partial.exists() and partial.stat().st_size > 0)
    finally:
        child.kill()  # SIGKILL: no cleanup runs in the child
        child.wait()
    files["kill-Q4_K_M.gguf"].hold_after = None
    files["kill-Q4_K_M.gguf"].release.set()
    on_disk = partial.stat().st_size
    served_before = fake_hub.served_for("kill-Q4_K_M.gguf")
    model = pull(plan_pull("org/Kill"))
    assert model.path.read_bytes() == data
    assert fake_hub.served_for("kill-Q4_K_M.gguf") - served_before == len(data) - on_disk
    assert not partial.exists()


def test_corrupted_download_is_deleted_and_reported(fake_hub: FakeHub) -> None:
    files = fake_hub.add_repo("org/Bad", {"bad-Q4_K_M.gguf": os.urandom(2 * MB)})
    files["bad-Q4_K_M.gguf"].corrupt = True
    with pytest.raises(ChecksumError, match=r"sha256.*deleted; run the pull again"):
        pull(plan_pull("org/Bad"))
    blobs = storage_dir("org/Bad") / "blobs"
    assert list(blobs.iterdir()) == []  # neither the bad blob nor a partial remains
    assert not list((storage_dir("org/Bad") / "snapshots").rglob("*.gguf"))
    assert library.scan_hf_cache() == []


def test_gated_repo_says_where_to_accept_the_license_and_where_the_token_goes(fake_hub: FakeHub) -> None:
    fake_hub.add_repo("meta/Gated", {"g-Q4_K_M.gguf": b"x" * 5000}, gated=True)
    plan = plan_pull("meta/Gated")  # listing files is public, downloading is not
    with pytest.raises(GatedRepoError) as err:
        pull(plan)
    message = str(err.value)
    assert f"{fake_hub.url}/meta/Gated" in message
    assert "HF_TOKEN" in message and str(paths.settings_file()) in message


def test_gated_repo_with_a_token_without_access_and_with_access(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_hub.add_repo("meta/Gated", {"g-Q4_K_M.gguf": b"x" * 5000}, gated=True)
    monkeypatch.setenv("HF_TOKEN", "hf_no_access")
    with pytest.raises(GatedRepoError, match="no access yet"):
        pull(plan_pull("meta/Gated"))
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    assert pull(plan_pull("meta/Gated")).path.read_bytes() == b"x" * 5000


def test_token_from_the_settings_file_is_used(fake_hub: FakeHub) -> None:
    from launcher.core import settings

    fake_hub.add_repo("acme/Private", {"p-Q4_K_M.gguf": b"p" * 100}, private=True)
    with pytest.raises(RepoNotFoundError, match=r"private.*HF_TOKEN"):
        plan_pull("acme/Private")
    settings.save(settings.Settings(hf_token=VALID_TOKEN))
    assert pull(plan_pull("acme/Private")).path.read_bytes() == b"p" * 100


def test_missing_repo_and_missing_file(fake_hub: FakeHub) -> None:
    fake_hub.add_repo("org/Here", {"here-Q4_K_M.gguf": b"h" * 100})
    with pytest.raises(RepoNotFoundError, match="No repo 'org/Nope'"):
        plan_pull("org/Nope")
    with pytest.raises(RepoNotFoundError, match=r"'other\.gguf' is not in org/Here\. It has: here-Q4_K_M\.gguf"):
        plan_pull("org/Here:other.gguf")


def test_not_enough_disk_is_caught_before_any_byte(fake_hub: FakeHub) -> None:
    fake_hub.add_repo("org/Big", {"big-Q4_K_M.gguf": os.urandom(3 * MB)})
    small_quota = SimpleNamespace(free=1 * MB)
    with pytest.raises(DiskFullError, match=r"needs 3\.0 MiB more .* 1\.0 MiB free"):
        pull(plan_pull("org/Big"), disk_usage=lambda _path: small_quota)
    assert fake_hub.served_for("big-Q4_K_M.gguf") == 0


def test_split_gguf_pulls_every_shard_of_one_quant(fake_hub: FakeHub) -> None:
    shards = {f"Q4_K_M/big-Q4_K_M-0000{i}-of-00003.gguf": os.urandom(MB) for i in (1, 2, 3)}
    fake_hub.add_repo("org/Split", {**shards, "big-Q8_0.gguf": os.urandom(MB)})
    plan = plan_pull("org/Split", quant="Q4_K_M")
    assert [f.path for f in plan.files] == sorted(shards)
    model = pull(plan)
    assert model.path.name == "big-Q4_K_M-00001-of-00003.gguf"
    for name, data in shards.items():
        assert (model.path.parents[1] / name).read_bytes() == data
    assert fake_hub.served_for("big-Q8_0.gguf") == 0


def test_mlx_repo_downloads_only_what_the_model_needs(fake_hub: FakeHub) -> None:
    fake_hub.add_repo(
        "mlx-community/Qwen3-0.6B-4bit",
        {
            "config.json": mlx_config(4),
            "model.safetensors": os.urandom(MB),
            "tokenizer.json": b"{}",
            "tokenizer_config.json": b"{}",
            "chat_template.jinja": b"{{ messages }}",
            "README.md": b"# card",
            "original/consolidated.pth": os.urandom(MB),
            "model-f16.gguf": os.urandom(MB),
        },
        tags=["mlx"],
    )
    model = pull(plan_pull("mlx-community/Qwen3-0.6B-4bit"))
    pulled = sorted(p.name for p in model.path.iterdir())
    expected = ["chat_template.jinja", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert pulled == expected
    assert (model.format, model.quant) == ("mlx", "4bit")
    entry = library.find_entry("mlx-community/Qwen3-0.6B-4bit")
    assert entry is not None and entry.model.format == "mlx" and entry.architecture is not None
    assert entry.architecture.layers == 28


def test_catalog_exl3_quant_comes_from_its_branch(fake_hub: FakeHub) -> None:
    from tests.catalog.helpers import exl3_config

    fake_hub.add_repo("turboderp/Qwen3-0.6B-exl3", {"README.md": b"pick a branch"})
    fake_hub.add_repo(
        "turboderp/Qwen3-0.6B-exl3",
        {"config.json": exl3_config(4.0), "model.safetensors": os.urandom(MB), "tokenizer.json": b"{}"},
        branch="4.0bpw",
    )
    model = pull(plan_pull("qwen3-0.6b", fmt="exl3", quant="4.0bpw"))
    assert (model.format, model.quant, model.catalog_id) == ("exl3", "4.0bpw", "qwen3-0.6b")
    ref = storage_dir("turboderp/Qwen3-0.6B-exl3") / "refs" / "4.0bpw"
    assert ref.read_text() == fake_hub.commit("turboderp/Qwen3-0.6B-exl3", "4.0bpw")
    entry = library.find_entry("turboderp/Qwen3-0.6B-exl3:4.0bpw")
    assert entry is not None and entry.model.catalog_id == "qwen3-0.6b" and entry.model.format == "exl3"


def test_catalog_pull_without_flags_follows_the_advisor(fake_hub: FakeHub) -> None:
    from launcher.hardware.recorded import load_recorded

    fake_hub.add_repo(
        "unsloth/Qwen3-0.6B-GGUF",
        {"Qwen3-0.6B-Q4_K_M.gguf": os.urandom(MB), "Qwen3-0.6B-Q8_0.gguf": os.urandom(MB)},
    )
    machine = load_recorded("cpu-avx2-laptop-16gb")
    plan = plan_pull("qwen3-0.6b", advise=lambda entry: advised_variant(entry, machine))
    assert plan.format == "gguf" and plan.catalog_id == "qwen3-0.6b"
    assert plan.files[0].path == f"Qwen3-0.6B-{plan.quant}.gguf"


def test_cancel_from_another_thread_keeps_a_resumable_partial(fake_hub: FakeHub) -> None:
    data = os.urandom(24 * MB)
    files = fake_hub.add_repo("org/Cancel", {"c-Q4_K_M.gguf": data})
    fake = files["c-Q4_K_M.gguf"]
    fake.hold_after = 16 * MB
    cancel = threading.Event()
    outcome: list[BaseException] = []

    def worker() -> None:
        try:
            pull(plan_pull("org/Cancel"), cancel=cancel)
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    wait_until(lambda: fake_hub.served_for("c-Q4_K_M.gguf") >= 16 * MB)
    cancel.set()
    fake.hold_after = None
    fake.release.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], DownloadCancelled)
    partial = storage_dir("org/Cancel") / "blobs" / f"{fake.sha256}.incomplete"
    on_disk = partial.stat().st_size
    assert 0 < on_disk < len(data)
    # The cancelled response may still be writing its last block into the closed connection: count from
    # when it has ended, or that block lands in the resumed pull's share (a busy machine's CI saw 1 MiB).
    wait_until(lambda: fake_hub.sending == 0)
    served_before = fake_hub.served_for("c-Q4_K_M.gguf")
    assert pull(plan_pull("org/Cancel")).path.read_bytes() == data
    assert fake_hub.served_for("c-Q4_K_M.gguf") - served_before == len(data) - on_disk


def test_offline_mode_lists_what_is_available_locally(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path
) -> None:
    library.add_imported(tiny_gguf, name="my-tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match=r"HF_HUB_OFFLINE(.|\n)*my-tiny"):
        plan_pull("org/Anything")


def test_unreachable_hub_is_an_offline_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(OfflineError, match="Cannot reach"):
        plan_pull("org/Anything")


def closed_port() -> int:
    """A loopback port with nothing listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_pulled_file_in_another_tools_cache_is_reused(fake_hub: FakeHub) -> None:
    data = os.urandom(MB)
    fake_hub.add_repo("org/Shared", {"s-Q4_K_M.gguf": data})
    theirs = hf_hub_download("org/Shared", "s-Q4_K_M.gguf", cache_dir=paths.hf_cache_dir(), endpoint=fake_hub.url)
    served = fake_hub.served_for("s-Q4_K_M.gguf")
    model = pull(plan_pull("org/Shared"))
    assert model.path == Path(theirs)
    assert fake_hub.served_for("s-Q4_K_M.gguf") == served  # nothing downloaded twice
    shutil.rmtree(paths.hf_cache_dir())
