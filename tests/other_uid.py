"""An interpreter another uid can run with this environment's packages, for tests that play a non-root trainer.

This interpreter may be unreadable to other uids (a pyenv under /root, mode 700): then the system's Python of
the same version runs instead, with this environment's packages (and the repository) on its path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def as_uid(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _runs_as(uid: int, python: str, env: dict[str, str]) -> bool:
    probe = "import pydantic, sandboxes"  # a compiled dependency and the repository's own code
    # as root, not setpriv: a fresh exec as ``uid`` with no capability left to read what ``uid`` cannot
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, cwd="/", env=env, preexec_fn=lambda: as_uid(uid), check=False
        )
    except PermissionError:  # the exec itself: ``uid`` cannot reach the interpreter
        return False
    return done.returncode == 0


def python_for_uid(uid: int) -> tuple[str, dict[str, str]]:
    """(interpreter, environment variables) with which ``uid`` runs Python with this environment's packages;
    skips, naming why, when no such interpreter is readable by ``uid``."""
    env = {"PATH": SAFE_PATH, "PYTHONPATH": f"{ROOT}{os.pathsep}{sysconfig.get_paths()['purelib']}"}
    if _runs_as(uid, sys.executable, env):
        return sys.executable, env
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path=SAFE_PATH)
    if python is not None and _runs_as(uid, python, env):
        return python, env
    pytest.skip(
        f"uid {uid} can run neither {sys.executable} nor a {version} on {SAFE_PATH} with this environment's packages "
        f"(install Debian's {version}, or make the venv and {ROOT} readable by other users)"
    )
