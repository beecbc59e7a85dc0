"""bench/studies/heldout_report.py on hand-made run directories: per-run paired changes, the spread, the verdicts."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

import heldout_report  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/


def _write_eval(run_dir: Path, phase: str, split: str, successes: dict[str, list[bool]], recovery: float) -> None:
    episodes = [s for runs in successes.values() for s in runs]
    report = {
        "samples": 2,
        "pass_at_k": {"1": sum(episodes) / len(episodes)},
        "mean_reward": sum(episodes) / len(episodes),
        "num_tasks": len(successes),
        "failed_episodes": 0,
        "tokens_generated": 100,
        "duration_s": 10.0,
        "tasks": [{"task_id": task, "successes": runs} for task, runs in successes.items()],
        "behaviour": {"turns_mean": 2.0, "tested_before_submit_frac": 0.5, "recovery_frac": recovery},
    }
    (run_dir / f"eval-{phase}-{split}.json").write_text(json.dumps(report))


def _make_run(tmp_path: Path, name: str, before: list[list[bool]], after: list[list[bool]]) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    tasks = [f"t{i}" for i in range(len(before))]
    _write_eval(run_dir, "before", "test_kinds", dict(zip(tasks, before)), 0.0)
    _write_eval(run_dir, "after", "test_kinds", dict(zip(tasks, after)), 0.25)
    steps = [{"step": 0}, {"step": 1, "episode/success_rate": 0.25, "perf/step_s": 30.0}]
    steps.append({"step": 2, "episode/success_rate": 0.5, "perf/step_s": 40.0})
    steps[1] |= {"rollout/signal_groups": 4.0, "rollout/groups_filtered": 3.0}  # dynamic sampling's metrics
    steps[2] |= {"rollout/signal_groups": 2.0}
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    return run_dir


T, F = True, False


def test_every_run_rising_beyond_the_spread_is_reported_with_intervals(tmp_path: Path, capsys) -> None:
    runs = [
        _make_run(tmp_path, "a", [[T, T], [F, F], [F, F], [F, F]], [[T, T], [T, T], [T, F], [F, F]]),  # .25 -> .625
        _make_run(tmp_path, "b", [[T, F], [F, F], [F, F], [F, F]], [[T, T], [T, F], [F, F], [F, F]]),  # .125 -> .375
        _make_run(tmp_path, "c", [[T, T], [F, F], [F, F], [F, F]], [[T, T], [T, T], [F, F], [F, F]]),  # .25 -> .5
    ]
    result = heldout_report.main([*map(str, runs), "--splits", "test_kinds", "--json", str(tmp_path / "out.json")])
    first = result["runs"][0]["splits"]["test_kinds"]
    assert (first["before"], first["after"]) == (0.25, 0.625)
    # Paired over tasks: per-task changes 0, +1, +0.5, 0.
    changes = [0.0, 1.0, 0.5, 0.0]
    half = 3.182 * statistics.stdev(changes) / math.sqrt(4)
    assert first["gain"]["mean"] == pytest.approx(0.375)
    assert first["gain"]["lo"] == pytest.approx(0.375 - half)
    assert first["behaviour"]["recovery_frac"] == (0.0, 0.25)
    assert result["runs"][0]["success_per_step"] == [0.25, 0.5]
    assert result["runs"][0]["train_steps_s"] == 70.0 and result["runs"][0]["eval_s"] == 20.0
    across = result["across_runs"]["test_kinds"]
    assert across["before_spread"] == pytest.approx(0.125)
    run_changes = [0.375, 0.25, 0.25]
    assert across["change"]["mean"] == pytest.approx(statistics.fmean(run_changes))
    assert across["change"]["hi"] - across["change"]["mean"] == pytest.approx(
        4.303 * statistics.stdev(run_changes) / math.sqrt(3)
    )
    assert across["rose_in_every_run"] and across["every_rise_beyond_spread"]
    out = capsys.readouterr().out
    assert "| `test_kinds` pass@1 | 0.25 → 0.62 | 0.12 → 0.38 | 0.25 → 0.50 |" in out
    assert "rose in every run: yes; every rise beyond the spread: yes" in out
    assert "| groups with signal / filtered out, per step | 4/3, 2/0 | 4/3, 2/0 | 4/3, 2/0 |" in out
    assert json.loads((tmp_path / "out.json").read_text())["across_runs"] == result["across_runs"]


def test_a_rise_within_the_spread_or_a_fall_is_not_called_learning(tmp_path: Path) -> None:
    runs = [
        _make_run(tmp_path, "a", [[T, T], [T, T], [F, F], [F, F]], [[T, T], [T, T], [T, F], [F, F]]),  # .5 -> .625
        _make_run(tmp_path, "b", [[F, F], [F, F], [F, F], [F, F]], [[T, F], [F, F], [F, F], [F, F]]),  # 0 -> .125
    ]
    across = heldout_report.main([*map(str, runs), "--splits", "test_kinds"])["across_runs"]["test_kinds"]
    assert across["rose_in_every_run"] and not across["every_rise_beyond_spread"]  # spread 0.5, rises 0.125
    runs.append(_make_run(tmp_path, "c", [[T, T], [F, F], [F, F], [F, F]], [[F, F], [F, F], [F, F], [F, F]]))
    across = heldout_report.main([*map(str, runs), "--splits", "test_kinds"])["across_runs"]["test_kinds"]
    assert not across["rose_in_every_run"]


def test_a_run_without_its_after_evaluation_is_named(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path, "a", [[T, T]], [[T, T]])
    (run / "eval-after-test_kinds.json").unlink()
    with pytest.raises(SystemExit) as exc:
        heldout_report.main([str(run), "--splits", "test_kinds"])
    assert exc.value.code == 2
    assert "eval-after-test_kinds.json is missing" in capsys.readouterr().err
