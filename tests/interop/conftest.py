"""The interop tests import their helpers and test servers from this folder (interop_harness, openenv_app, ...)."""

from __future__ import annotations

import sys
from pathlib import Path

# pytest's importlib mode does not put this folder on sys.path; the tests and their subprocesses need it.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
