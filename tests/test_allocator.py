"""The agentrl command's allocator: TCMalloc preloaded by one re-execution, never passed on to child processes.

Each case runs a fresh interpreter (re-execution replaces the process); the probe prints what it ended up with.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agentrl.errors import ConfigError
from agentrl.util import allocator

PROBE = """
import os, subprocess, sys
from agentrl.util.allocator import loaded_allocator, use_preferred_allocator
from agentrl.util.heap import trim_heap
use_preferred_allocator()
child = subprocess.run(["sh", "-c", "grep -c libtcmalloc /proc/self/maps || true"], capture_output=True, text=True)
print(loaded_allocator(), os.environ.get("LD_PRELOAD", "-"), child.stdout.strip(), trim_heap(), sys.argv[1:])
"""


def _probe(setting: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["AGENTRL_ALLOCATOR"] = setting
    cmd = [sys.executable, "-c", PROBE, "an-argument"]
    return (
        subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=60)
        .stdout.strip()
        .split(maxsplit=4)
    )


@pytest.fixture
def tcmalloc() -> str:
    library = allocator.find_tcmalloc()
    if library is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs scripts/setup.sh, which installs libtcmalloc-minimal4; it is missing")
        pytest.skip("no TCMalloc here: apt-get install libtcmalloc-minimal4")
    return library


def test_auto_reexecutes_under_tcmalloc_and_children_start_without_it(tcmalloc: str) -> None:
    loaded, preload, child_maps, trimmed, argv = _probe("auto")
    assert loaded == "tcmalloc"  # mapped into the re-executed process
    assert preload == "-" and child_maps == "0"  # its children (sandboxes, servers) keep the system allocator
    assert trimmed == "True"
    assert argv == "['an-argument']"  # the command line survived the re-execution


def test_system_keeps_glibc() -> None:
    loaded, preload, child_maps, _, argv = _probe("system")
    assert (loaded, preload, child_maps, argv) == ("system", "-", "0", "['an-argument']")


def test_a_bad_setting_is_refused_by_the_command() -> None:
    env = {**os.environ, "AGENTRL_ALLOCATOR": "jemalloc-please"}
    done = subprocess.run([sys.executable, "-m", "agentrl", "envs"], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "AGENTRL_ALLOCATOR='jemalloc-please' is not one of" in done.stderr


def test_asking_for_tcmalloc_without_it_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake: the library is installed on CI machines, so its absence is simulated by the lookup returning None."""
    monkeypatch.setenv("AGENTRL_ALLOCATOR", "tcmalloc")
    monkeypatch.delenv("_AGENTRL_ALLOCATOR_PRELOADED", raising=False)
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    monkeypatch.setattr(allocator, "loaded_allocator", lambda: "system")
    with pytest.raises(ConfigError, match="apt-get install libtcmalloc-minimal4"):
        allocator.use_preferred_allocator()
