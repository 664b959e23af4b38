"""The frozen app's entry script (packaging/launcher.spec): the same start as `python -m launcher`.

A script of its own rather than launcher/__main__.py itself, because PyInstaller puts a script's
folder on the module search path, and the launcher's subpackages must not turn up as top-level
modules (`cli`, `core`) in the analysis.
"""

from launcher.__main__ import run

raise SystemExit(run())
