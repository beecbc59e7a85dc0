"""``OmpTeam.alone``: where the team sleeps between regions, the calling thread's OpenMP team is one thread during
the call and its old size after, also when the call raises, and other threads keep their team; where it spins, the
call keeps the team."""

from __future__ import annotations

import threading

import pytest
import torch

from agentrl.engines.embedded.cpu.omp_team import OmpTeam

TEAM = OmpTeam(sleeps=True)


@pytest.fixture(autouse=True)
def _two_threads() -> None:
    if not TEAM.available:
        pytest.skip("this torch build has no OpenMP runtime")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_call_runs_alone_and_the_team_comes_back() -> None:
    assert TEAM.alone(torch.get_num_threads) == 1
    assert torch.get_num_threads() == 2


def test_the_team_comes_back_when_the_call_raises() -> None:
    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        TEAM.alone(fails)
    assert torch.get_num_threads() == 2


def test_another_thread_keeps_its_team_meanwhile() -> None:
    seen: list[int] = []

    def other_thread() -> None:  # a new thread's team starts at torch's process-wide setting
        seen.append(torch.get_num_threads())

    def inside() -> int:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        return torch.get_num_threads()

    assert TEAM.alone(inside) == 1
    assert seen == [2]


def test_a_spinning_team_keeps_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OmpTeam(sleeps=False).alone(torch.get_num_threads) == 2
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert not OmpTeam().sleeps  # the agentrl command's short spin
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert OmpTeam().sleeps
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    assert OmpTeam().sleeps
