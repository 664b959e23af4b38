"""The names of the Prometheus series `launcher serve` exports on /metrics, declared once.

The server declares them (server/metrics.py); the app's gauges (ui/metrics.py), the benchmarks and
calibration (bench/*) and the reading of a remote launcher's /metrics (server/upstreams/remote_metrics.py)
look them up. They sit in core so that all of these can import them: a name changed here changes
for the writer and every reader at once, where a string typed in each would drift silently.

Each constant is the name as declared. In the text format a counter's sample is the name plus
`_total` (`total`), a histogram's are the name plus `_sum`, `_count` and `_bucket`; readers of
samples use those helpers, never a suffix of their own.
"""

from __future__ import annotations

# ----- per request (server/metrics.ServerMetrics) -----------------------------------------------
PROMPT_TOKENS = "launcher_prompt_tokens"  # counter
GENERATION_TOKENS = "launcher_generation_tokens"  # counter
REQUESTS = "launcher_requests"  # counter, by endpoint and status
TIME_TO_FIRST_TOKEN_SECONDS = "launcher_time_to_first_token_seconds"  # histogram
INTER_TOKEN_LATENCY_SECONDS = "launcher_inter_token_latency_seconds"  # histogram
REQUEST_DURATION_SECONDS = "launcher_request_duration_seconds"  # histogram
STREAM_DECODE_TOKENS = "launcher_stream_decode_tokens"  # counter
STREAM_DECODE_SECONDS = "launcher_stream_decode_seconds"  # counter
PREFILL_UNCACHED_TOKENS = "launcher_prefill_uncached_tokens"  # counter
PREFILL_SECONDS = "launcher_prefill_seconds"  # counter
TOOL_CALLS = "launcher_tool_calls"  # counter, by outcome and grammar

# ----- live, read at each scrape -----------------------------------------------------------------
BUSY_SECONDS = "launcher_busy_seconds"  # counter
PREFILL_TOKENS_PER_SECOND = "launcher_prefill_tokens_per_second"  # gauge
DECODE_TOKENS_PER_SECOND = "launcher_decode_tokens_per_second"  # gauge

# ----- the engines' stats (engines/base.EngineStats) ---------------------------------------------
REQUESTS_RUNNING = "launcher_requests_running"  # gauge
REQUESTS_WAITING = "launcher_requests_waiting"  # gauge
KV_CACHE_USED_TOKENS = "launcher_kv_cache_used_tokens"  # gauge
KV_CACHE_TOTAL_TOKENS = "launcher_kv_cache_total_tokens"  # gauge
KV_CACHE_USAGE_RATIO = "launcher_kv_cache_usage_ratio"  # gauge
SWA_CHECKPOINTS = "launcher_swa_checkpoints"  # gauge
SWA_CHECKPOINTS_MAX = "launcher_swa_checkpoints_max"  # gauge
SWA_CHECKPOINT_BUDGET_BYTES = "launcher_swa_checkpoint_budget_bytes"  # gauge
SWA_CHECKPOINT_RESTORES = "launcher_swa_checkpoint_restores"  # counter
PROMPT_CACHE_DISK_BYTES = "launcher_prompt_cache_disk_bytes"  # gauge
PROMPT_CACHE_DISK_ENTRIES = "launcher_prompt_cache_disk_entries"  # gauge
PROMPT_CACHE_DISK_BUDGET_BYTES = "launcher_prompt_cache_disk_budget_bytes"  # gauge
PROMPT_CACHE_DISK_HITS = "launcher_prompt_cache_disk_hits"  # counter
PROMPT_CACHE_DISK_MISSES = "launcher_prompt_cache_disk_misses"  # counter
PROMPT_CACHE_DISK_RESTORED_TOKENS = "launcher_prompt_cache_disk_restored_tokens"  # counter
PROMPT_CACHE_DISK_RESTORE_SECONDS = "launcher_prompt_cache_disk_restore_seconds"  # counter
PROMPT_CACHE_DISK_WRITES = "launcher_prompt_cache_disk_writes"  # counter
PROMPT_CACHE_DISK_WRITE_FAILURES = "launcher_prompt_cache_disk_write_failures"  # counter
PREFIX_CACHE_HITS = "launcher_prefix_cache_hits"  # counter
PREFIX_CACHE_MISSES = "launcher_prefix_cache_misses"  # counter
PREFIX_CACHE_HIT_TOKENS = "launcher_prefix_cache_hit_tokens"  # counter
SPECULATIVE_DRAFT_TOKENS = "launcher_speculative_draft_tokens"  # counter
SPECULATIVE_ACCEPTED_TOKENS = "launcher_speculative_accepted_tokens"  # counter
ENGINE_MEMORY_BYTES = "launcher_engine_memory_bytes"  # gauge, by kind


def total(counter: str) -> str:
    """The sample name of `counter` in the text format."""
    return counter + "_total"


def sum_of(histogram: str) -> str:
    """The sample name of the sum of `histogram`'s observations."""
    return histogram + "_sum"


def count_of(histogram: str) -> str:
    """The sample name of the number of `histogram`'s observations."""
    return histogram + "_count"
