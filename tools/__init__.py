"""The programs behind scripts/: benchmarks, builds, soaks and the frozen-app and fresh-machine checks.

Each `scripts/<name>` is a thin entry point that calls `tools.<name with _>.main()`, so that ruff and
mypy check the code here like the launcher's. Importing this package imports nothing but the standard
library: build-engine, build-gpu-pack and the frozen-app checks run under a bare system Python.
"""
