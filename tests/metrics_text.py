"""Reading a /metrics scrape in tests the way Prometheus users do: by name, summed over labels.

Every per-model series carries a `model` label; a test that asks for the server's number sums
over it, and one that cares about one model passes `model=...`.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`; an AssertionError when none."""
    values = [
        float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items())
    ]
    assert values, f"{name}{labels or ''} is not in /metrics"
    return sum(values)
