"""What the ExLlamaV3 and ExLlamaV2 engines share: both run a dynamic generator with paged attention.

Both runtimes expose the same shape (a generator that takes jobs, `iterate()` returning result
dicts, `cancel(job)`), so one scheduler thread, one LoadedModel, one sampling/constraint mapping
and one cache-sizing rule serve both; `exllamav3/engine.py` and `exllamav2/engine.py` only build
the runtime objects. Nothing here imports a runtime: each engine hands in a `Backend`.

These engines are verified only on an NVIDIA GPU (`scripts/gpu-check`); CI tests everything above
the runtime calls against a stand-in with the runtime's interface (tests/engines/exllama/).
"""
