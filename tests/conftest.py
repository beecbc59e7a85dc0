"""Shared fixtures: a tiny local model built once per session (no model hub)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen3 model with a ChatML tokenizer, in Hugging Face format."""
    from agentrl.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


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
