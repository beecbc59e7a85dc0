"""Ctrl-C/SIGTERM handling of ``agentrl train`` and the checkpoint cadence at step boundaries (real signals)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentrl.config.sections import TrainerConfig
from agentrl.trainer.boundary import Boundary, StepBoundaries
from agentrl.trainer.distributed import DistInfo
from agentrl.trainer.interrupt import StopSignals

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _deliver(sig: signal.Signals) -> None:
    """Send ``sig`` to this process and give the interpreter a moment to run the Python handler."""
    os.kill(os.getpid(), sig)
    time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_asks_for_a_stop_and_a_second_aborts(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with StopSignals(repeat_window_s=0.0) as signals:
        with signals.graceful():
            _deliver(sig)
            assert signals.requested == sig.name  # recorded, nothing raised: the step goes on
            with pytest.raises(KeyboardInterrupt):
                _deliver(sig)
    assert signal.getsignal(sig) is before  # handlers restored


def test_a_repeat_within_the_window_is_the_same_request() -> None:
    with StopSignals(repeat_window_s=30.0) as signals, signals.graceful():
        _deliver(signal.SIGINT)
        _deliver(signal.SIGINT)  # as torchrun forwards the terminal's Ctrl-C to a worker that got it too
        assert signals.requested == "SIGINT"


def test_outside_the_step_loop_a_signal_aborts_at_once() -> None:
    with StopSignals() as signals:
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGTERM)
        assert signals.requested is None


def test_boundaries_checkpoint_by_step_time_end_and_stop() -> None:
    with StopSignals() as signals:
        steps = StepBoundaries(
            TrainerConfig(steps=10, checkpoint_every_steps=4, checkpoint_every_s=None), DistInfo(), signals
        )
        assert [steps.decide(s, exhausted=False).save for s in range(1, 11)] == [s in (4, 8, 10) for s in range(1, 11)]
        assert steps.decide(3, exhausted=True).save  # the dataset ran out: the last boundary
        timed = StepBoundaries(
            TrainerConfig(steps=10, checkpoint_every_steps=100, checkpoint_every_s=0.2), DistInfo(), signals
        )
        assert not timed.decide(1, exhausted=False).save
        time.sleep(0.25)
        assert timed.decide(2, exhausted=False).save
        timed.saved()
        assert not timed.decide(3, exhausted=False).save  # the cadence counts from the last checkpoint
        with signals.graceful():
            _deliver(signal.SIGINT)
        assert timed.decide(4, exhausted=False) == Boundary(save=True, stop=True)
        assert timed.stopped_at == 4


@pytest.mark.slow
def test_under_torchrun_every_rank_stops_at_the_boundary_one_rank_was_signalled_for(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "decisions"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(port), str(HERE / "boundary_worker.py"), str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["requested"] for r in ranks] == [None, "SIGTERM"]
    expected = [{"step": 1, "save": False, "stop": False}, {"step": 2, "save": True, "stop": True}]
    assert ranks[0]["decisions"] == ranks[1]["decisions"] == expected
