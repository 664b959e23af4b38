"""The result of a live test: one `Check` per thing an agent relies on, and the `LiveTestReport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

CheckStatus = Literal["pass", "fail", "warn", "skip"]

# Check names in the order they run (the app can lay out its rows from this).
CHECK_NAMES: tuple[str, ...] = (
    "connect",
    "auth",
    "model",
    "context",
    "stream",
    "usage",
    "tool_call",
    "tool_history",
)

CHECK_TITLES: dict[str, str] = {
    "connect": "Server reachable",
    "auth": "API key accepted",
    "model": "Model listed",
    "context": "Context length",
    "stream": "Streaming text",
    "usage": "Token usage in the stream",
    "tool_call": "Tool call parsed",
    "tool_history": "Tool result accepted",
}

# The tool every live test asks for. An enum keeps the arguments short even on a tiny model.
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Get the current weather for a city."
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}},
    "required": ["city"],
}
TOOL_RESULT = "Sunny, 21 degrees Celsius."
TEXT_PROMPT = "Say hello in one short sentence."
TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool."


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, how it went, and a plain sentence why."""

    name: str
    status: CheckStatus
    message: str

    @property
    def title(self) -> str:
        """The human title of this check."""
        return CHECK_TITLES.get(self.name, self.name)

    def __str__(self) -> str:
        return f"[{self.status.upper():4}] {self.title}: {self.message}"


@dataclass
class LiveTestReport:
    """Every check of one live test, in order."""

    agent_id: str
    agent_name: str
    base_url: str
    model_id: str
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, status: CheckStatus, message: str) -> Check:
        """Record one check and return it."""
        check = Check(name, status, message)
        self.checks.append(check)
        return check

    def skip_rest(self, reason: str) -> None:
        """Mark every check not yet recorded as skipped, with the reason."""
        done = {check.name for check in self.checks}
        for name in CHECK_NAMES:
            if name not in done:
                self.add(name, "skip", reason)

    def get(self, name: str) -> Check:
        """The check called `name` (KeyError if it was never recorded)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    @property
    def ok(self) -> bool:
        """True when nothing failed (warnings and skips allowed)."""
        return all(check.status != "fail" for check in self.checks)

    @property
    def summary(self) -> str:
        """One sentence for a status line."""
        failed = [c.title for c in self.checks if c.status == "fail"]
        if not failed:
            warned = sum(c.status == "warn" for c in self.checks)
            suffix = f" ({warned} warning{'s' if warned != 1 else ''})" if warned else ""
            return f"{self.agent_name} should work with {self.model_id}{suffix}."
        return f"{self.agent_name} will have problems: {', '.join(failed)} failed."

    def __str__(self) -> str:
        header = f"Live test for {self.agent_name} against {self.base_url} (model {self.model_id})"
        return "\n".join([header, *(str(check) for check in self.checks), self.summary])

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view."""
        return {
            "agent": self.agent_id,
            "base_url": self.base_url,
            "model": self.model_id,
            "ok": self.ok,
            "summary": self.summary,
            "checks": [
                {"name": c.name, "title": c.title, "status": c.status, "message": c.message} for c in self.checks
            ],
        }


def describe_error(err: BaseException) -> str:
    """A short, user-facing description of an SDK or network error (no traceback)."""
    status = getattr(err, "status_code", None)
    body_message = _error_body_message(getattr(err, "body", None))
    if status is not None:
        return f"HTTP {status}: {body_message or getattr(err, 'message', None) or err}"
    name = type(err).__name__
    if "Timeout" in name:
        return "the server did not answer in time"
    if "Connection" in name:
        return "the server dropped the connection mid-request (a server-side error: see the server's log)"
    text = str(err).strip() or name
    return text if len(text) <= 300 else text[:297] + "..."


def _error_body_message(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return None
