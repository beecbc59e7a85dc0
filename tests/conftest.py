"""Shared fixtures and policies: a tiny local model built once per session (no model hub), and the rule
that under CI=true a Docker test may not skip (a missing engine or image fails the run instead)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
