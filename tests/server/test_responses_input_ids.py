"""A Responses input item whose call id or name is not a string is the client's mistake: a 400, never a 500
(the fuzzer found a nested list as `call_id` reaching the history's set of open calls)."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

CALL = {"type": "function_call", "name": "get_weather", "call_id": "call_1", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([{**CALL, "call_id": [[[]]]}], "input.1"),
        ([{**CALL, "call_id": 7}], "input.1"),
        ([{**CALL, "name": {"x": 1}}], "input.1"),
        ([CALL, {**OUTPUT, "call_id": ["call_1"]}], "input.2.call_id"),
    ],
)
def test_a_call_id_or_name_that_is_not_a_string_is_a_400(
    serve: ServeFn, fake_model: FakeModel, items: list[dict[str, object]], param: str
) -> None:
    body = {"model": "x", "max_output_tokens": 4, "input": [{"type": "message", "role": "user", "content": "hi"}]}
    body["input"] = [*body["input"], *items]  # type: ignore[list-item]
    with serve(fake_model) as url:
        for stream in (False, True):
            response = httpx.post(f"{url}/v1/responses", json={**body, "stream": stream}, timeout=30)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert fake_model.requests == []


def test_string_ids_still_replay_the_call_and_its_output(serve: ServeFn, fake_model: FakeModel) -> None:
    body = {
        "model": "x",
        "max_output_tokens": 4,
        "input": [{"type": "message", "role": "user", "content": "weather?"}, CALL, OUTPUT],
    }
    with serve(fake_model) as url:
        assert httpx.post(f"{url}/v1/responses", json=body, timeout=30).status_code == 200
    assert "sunny" in fake_model.detokenize(fake_model.requests[-1].prompt_tokens)
