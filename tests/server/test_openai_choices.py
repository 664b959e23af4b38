"""How a request's `n` choices run: the later ones start once the first has read the prompt and
then run beside it, each with its own seed; one that cannot start fails the whole request; a
client that leaves stops them all.

The engine seam is scripted (a first token that takes a while, like a long prompt being read);
the routes, SSE and HTTP are the real server's. What the choices look like on the wire with a
real engine is tests/conformance/test_openai_choices.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from launcher.engines.base import GenerationEvent, GenerationRequest, QueueFullError
from launcher.server.core.choices import choice_seed
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

HELLO = [{"role": "user", "content": "hello"}]
READ_S = 0.3  # how long the scripted model takes to "read the prompt"


@dataclass
class RecordingModel(FakeModel):
    """The scripted model, noting when each generation starts and how many others were running then;
    with `refuse_after`, a full queue for every generation after that many."""

    starts: list[tuple[float, int]] = field(default_factory=list)
    refuse_after: int | None = None

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Start one generation (or refuse it as a full queue would)."""
        if self.refuse_after is not None and len(self.starts) >= self.refuse_after:
            raise QueueFullError(retry_after_s=2.0)
        self.starts.append((time.monotonic(), self.running))
        return super().generate(request)


def long_model(**overrides: object) -> RecordingModel:
    # 200 tokens 10 ms apart: choice 0 is still writing for seconds after its first token
    return RecordingModel(reply=lambda _: "abcdefghij" * 20, delay=0.01, first_delay=READ_S, **overrides)  # type: ignore[arg-type]


def wait_until(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_later_choices_start_after_the_first_read_the_prompt_and_run_beside_it(serve: ServeFn) -> None:
    model = long_model()
    with serve(model) as url:
        body = {"messages": HELLO, "n": 3, "seed": 7, "max_tokens": 200}
        reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    assert [choice["index"] for choice in reply["choices"]] == [0, 1, 2]
    first_started = model.starts[0][0]
    assert len(model.starts) == 3
    assert all(started - first_started >= READ_S for started, _ in model.starts[1:])  # after the prompt
    assert all(running >= 1 for _, running in model.starts[1:])  # while choice 0 still writes
    assert [request.sampling.seed for request in model.requests] == [choice_seed(7, i) for i in range(3)]
    assert len({request.sampling.seed for request in model.requests}) == 3
    assert reply["usage"]["completion_tokens"] == 600


def test_a_choice_that_cannot_start_fails_the_request_and_stops_the_others(serve: ServeFn) -> None:
    model = long_model(refuse_after=1)
    with serve(model) as url:
        body = {"messages": HELLO, "n": 2, "max_tokens": 200}
        whole = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert wait_until(lambda: model.running == 0)
        model.starts.clear()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as reply:
            assert reply.status_code == 200  # the headers went out with choice 0
            payloads = [line[6:] for line in reply.iter_lines() if line.startswith("data: ")]
        assert wait_until(lambda: model.running == 0)
    assert whole.status_code == 429 and whole.headers["retry-after"] == "2"
    assert whole.json()["error"]["code"] == "queue_full"
    assert payloads[-1] == "[DONE]"
    events = [json.loads(p) for p in payloads[:-1]]
    assert events[-1]["error"]["code"] == "queue_full"
    assert not any(choice.get("finish_reason") for event in events[:-1] for choice in event["choices"])
    assert model.closed_early == 2  # choice 0 of each request, stopped unfinished


def test_a_client_that_leaves_stops_every_choice(serve: ServeFn) -> None:
    model = long_model()
    with serve(model) as url:
        body = {"messages": HELLO, "n": 3, "max_tokens": 200, "stream": True}
        seen: set[int] = set()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    if choice["delta"].get("content"):
                        seen.add(choice["index"])
                if seen == {0, 1, 2}:
                    break  # every choice is writing: leave
        assert wait_until(lambda: model.running == 0)
    assert model.closed_early == 3
