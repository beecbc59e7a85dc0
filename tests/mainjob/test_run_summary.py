"""bench/studies/run_summary.py on a hand-made run directory: step sums, tool waits, evaluations, GNU time."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

import run_summary  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

TIME_LOG = """\tCommand being timed: "agentrl train configs/quickstart.yaml"
\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03.50
\tMaximum resident set size (kbytes): 4194304
"""


def _make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    rows = [
        {"eval/test_kinds/tested_before_submit_frac": 0.5},  # an evaluation row: not a step
        {"perf/step_s": 10.0, "rollout/wall_s": 6.0, "train/time_s": 4.0, "train/trained_tokens": 200.0,
         "rollout/tokens_generated": 300.0},
        {"perf/step_s": 20.0, "rollout/wall_s": 12.0, "train/time_s": 6.0, "train/trained_tokens": 300.0,
         "rollout/tokens_generated": 500.0},
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    turns = [{"info": {"sandbox_time_s": 0.5}}, {"info": {"sandbox_time_s": 6.0}}, {"info": {}}]
    with gzip.open(run / "trajectories" / "step_000001.jsonl.gz", "wt") as stream:
        stream.write(json.dumps({"episodes": [{"turns": turns[:2]}, {"turns": turns[2:]}]}) + "\n")
    for when, value in (("before", 0.13), ("after", 0.22)):
        (run / f"eval-{when}-test_instances.json").write_text(json.dumps({"mean_reward": value}))
    return run


def test_a_run_is_summed_over_its_training_steps_only(tmp_path: Path) -> None:
    log = tmp_path / "time.log"
    log.write_text(TIME_LOG)
    summary = run_summary.summarize(_make_run(tmp_path), log)
    assert (summary["steps"], summary["steps_s"], summary["rollout_s"], summary["update_s"]) == (2, 30.0, 18.0, 10.0)
    assert summary["update_tokens_per_s_per_trained_token"] == 50.0 and summary["tokens_generated"] == 800.0
    assert (summary["tool_s"], summary["longest_tool_call_s"], summary["turns"]) == (6.5, 6.0, 3)
    assert summary["test_instances_before"] == 0.13 and summary["test_instances_after"] == 0.22
    assert summary["wall_s"] == 3723.5 and summary["peak_rss_gib"] == 4.0


def test_a_run_without_training_steps_or_a_log_without_time_is_named(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    (run / "metrics.jsonl").write_text(json.dumps({"eval/x": 1.0}) + "\n")
    with pytest.raises(SystemExit, match="no training step"):
        run_summary.summarize(run, None)
    log = tmp_path / "plain.log"
    log.write_text("trained\n")
    with pytest.raises(SystemExit, match="no GNU time -v summary"):
        run_summary.time_log(log)
