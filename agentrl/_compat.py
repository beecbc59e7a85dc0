"""One release of grace for modules that moved (listed in ``agentrl._moved``).

A shim at the old path calls ``moved(__name__)``: the import gives the new module itself (so its private
names, monkeypatching and isinstance checks all still agree) and warns the importing code, naming the new path.
"""

from __future__ import annotations

import importlib
import sys
import warnings

from agentrl._moved import MOVED


def _importer_stacklevel() -> int:
    """The stack level of the code that imported the shim, past the import machinery's frames."""
    frame, level = sys._getframe(3), 3  # 0: here, 1: moved(), 2: the shim module, 3: whoever imported it
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame, level = frame.f_back, level + 1
    return level


def moved(old: str) -> None:
    """Make the module being imported as ``old`` the module it moved to, with a DeprecationWarning naming it."""
    new = MOVED[old]
    warnings.warn(
        f"{old} moved to {new}: import {new} instead ({old} goes in the next release)",
        DeprecationWarning,
        stacklevel=_importer_stacklevel(),
    )
    sys.modules[old] = importlib.import_module(new)
