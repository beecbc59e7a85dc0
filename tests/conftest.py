"""Shared fixtures and policies: a tiny local model built once per session (no model hub), and the rule
that under CI=true a Docker test may not skip (a missing engine or image fails the run instead)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytest's importlib mode puts no test folder on sys.path: the helpers shared across folders (job_harness) live here
TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen3 model with a ChatML tokenizer, in Hugging Face format."""
    from agentrl.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """CI=true: a skipped test marked ``docker`` is reported as failed, whatever fixture skipped it.

    Every Docker-dependent test carries the ``docker`` marker, so this one hook keeps CI from passing
    with the Docker half of the suite silently skipped (a broken engine set-up, a missing image).
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("CI") == "true" and item.get_closest_marker("docker") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI=true but this Docker test was skipped ({reason}); fix the Docker set-up"


class DiskJournal:
    """A recorded spy on ``os.fsync`` and ``os.replace`` (both still run): a fake for a fault we cannot cause.

    Power loss cannot be produced in a test, so durability is checked by its precondition: the order in
    which files and directories are fsynced relative to the renames that publish them.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import os

        self.events: list[tuple[str, str]] = []  # ("fsync", path) or ("replace", "src -> dst")
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            real_fsync(fd)

        def replace(src: object, dst: object) -> None:
            self.events.append(("replace", f"{src} -> {dst}"))
            real_replace(src, dst)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def index(self, kind: str, path: object) -> int:
        """Position of the first event of ``kind`` on ``path`` (a ValueError names it when absent)."""
        for i, event in enumerate(self.events):
            if event == (kind, str(path)):
                return i
        raise ValueError(f"no {kind} of {path} in {self.events}")

    def fsynced(self, path: object) -> int:
        """Position of the last fsync of ``path``."""
        return max(i for i, event in enumerate(self.events) if event == ("fsync", str(path)))


@pytest.fixture
def disk_journal(monkeypatch: pytest.MonkeyPatch) -> DiskJournal:
    """Records every fsync and replace of the test (see ``DiskJournal``)."""
    return DiskJournal(monkeypatch)
