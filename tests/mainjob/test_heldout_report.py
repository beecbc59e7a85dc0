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


def _write_eval(
    run_dir: Path,
    phase: str,
    split: str,
    successes: dict[str, list[bool]],
    recovery: float,
    failed_runs: dict[str, list[bool]] | None = None,
) -> None:
    episodes = [s for runs in successes.values() for s in runs]
    failed_runs = failed_runs or {task: [False] * len(runs) for task, runs in successes.items()}
    report = {
        "samples": 2,
        "pass_at_k": {"1": sum(episodes) / len(episodes)},
        "mean_reward": sum(episodes) / len(episodes),
        "num_tasks": len(successes),
        "failed_episodes": 0,
        "tokens_generated": 100,
        "duration_s": 10.0,
        "tasks": [
            {"task_id": task, "successes": runs, "failed_runs": failed_runs[task]} for task, runs in successes.items()
        ],
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


def test_each_run_is_judged_by_its_paired_interval_over_tasks(tmp_path: Path, capsys) -> None:
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
    # Four tasks are too few: every run's paired interval reaches below 0 (run a's: +0.375 +- 0.76).
    assert across["verdicts"] == ["not distinguishable from 0"] * 3
    assert across["runs_rose"] == 0 and not across["rose_in_every_run"]
    assert across["verdict_over_runs"] == "rose"  # the mean change over runs, interval over runs
    out = capsys.readouterr().out
    assert "| `test_kinds` pass@1 | 0.25 → 0.62 | 0.12 → 0.38 | 0.25 → 0.50 |" in out
    assert "(rose, its interval above 0, in 0 of 3); mean change over 3 runs +0.292 [+0.11, +0.47]: rose" in out
    assert "| groups with signal / filtered out, per step | 4/3, 2/0 | 4/3, 2/0 | 4/3, 2/0 |" in out
    assert json.loads((tmp_path / "out.json").read_text())["across_runs"] == result["across_runs"]


def test_a_rise_whose_paired_interval_includes_0_is_not_called_a_rise(tmp_path: Path, capsys) -> None:
    # Greedy evaluations (one sample per task) agree exactly before training: a spread of 0, which any rise
    # exceeded. The judge is each run's paired interval over tasks: +1 on 3 tasks and -1 on 2 of 25 is +0.04 with
    # an interval of about [-0.12, +0.20].
    before = [[F]] * 3 + [[T]] * 2 + [[F]] * 20
    after = [[T]] * 3 + [[F]] * 2 + [[F]] * 20
    runs = [_make_run(tmp_path, name, before, after) for name in "abc"]
    result = heldout_report.main([*map(str, runs), "--splits", "test_kinds", "--target-split", "test_kinds"])
    gain = result["runs"][0]["splits"]["test_kinds"]["gain"]
    assert gain["mean"] == pytest.approx(0.04) and gain["lo"] < 0 < gain["hi"]
    across = result["across_runs"]["test_kinds"]
    assert across["verdicts"] == ["not distinguishable from 0"] * 3
    assert not across["rose_in_every_run"] and across["runs_rose"] == 0
    assert not result["targets"]["heldout"]["met"]
    out = capsys.readouterr().out
    assert "beyond the spread: yes" not in out
    assert "per run: not distinguishable from 0, not distinguishable from 0, not distinguishable from 0" in out
    assert "interval above 0 in 0 of 3 runs: NOT met" in out


def test_a_fall_is_called_a_fall(tmp_path: Path) -> None:
    before = [[T]] * 6 + [[F]] * 4
    after = [[F]] * 6 + [[F]] * 4
    runs = [_make_run(tmp_path, "a", before, after), _make_run(tmp_path, "b", before, after)]
    across = heldout_report.main([*map(str, runs), "--splits", "test_kinds"])["across_runs"]["test_kinds"]
    assert across["verdicts"] == ["fell", "fell"] and across["verdict_over_runs"] == "fell"


def test_the_targets_curve_held_out_change_and_pooled_recovery(tmp_path: Path, capsys) -> None:
    tasks = [f"t{i}" for i in range(8)]
    runs = []
    for name in "abc":
        run_dir = tmp_path / name
        run_dir.mkdir()
        # Before: every task fails its run and stays failed. After: tasks 0-5 recover (fail a run, then pass).
        _write_eval(run_dir, "before", "test_instances", {t: [F] for t in tasks}, 0.0, {t: [T] for t in tasks})
        after_ok = {t: [i < 6] for i, t in enumerate(tasks)}
        _write_eval(run_dir, "after", "test_instances", after_ok, 0.75, {t: [T] for t in tasks})
        success = [0.1, 0.2, 0.1, 0.3, 0.3, 0.4, 0.5, 0.5] if name != "c" else [0.3] * 8
        steps = [{"step": i + 1, "episode/success_rate": s} for i, s in enumerate(success)]
        (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n")
        runs.append(run_dir)
    result = heldout_report.main([*map(str, runs), "--splits", "test_instances"])
    goals = result["targets"]
    first = goals["curve"]["per_run"][0]
    assert (first["quarter"], first["first"], first["last"]) == (2, pytest.approx(0.15), pytest.approx(0.5))
    assert first["met"] and not goals["curve"]["per_run"][2]["met"] and not goals["curve"]["met"]
    assert goals["heldout"]["rose"] == [True, True, True] and goals["heldout"]["met"]
    pooled = goals["recovery"]["pooled"]
    assert (pooled["before"], pooled["after"]) == (0.0, 0.75)
    # Per task the change is 1 (tasks 0-5) or 0 (6, 7) in every run: mean 0.75, t-interval over the 8 tasks.
    half = 2.365 * statistics.stdev([1.0] * 6 + [0.0] * 2) / math.sqrt(8)
    assert pooled["change"]["lo"] == pytest.approx(0.75 - half, abs=1e-3) and pooled["met"]
    out = capsys.readouterr().out
    assert "1. training success, first vs last quarter of steps, per run: 0.15 -> 0.50 (+0.35)" in out
    assert "in every run: NOT met" in out
    assert "3. test_instances recovered after a failed run (of episodes with one), per run: 0.00 -> 0.75" in out


def test_recovery_without_per_task_flags_is_reported_missing(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path, "a", [[T], [F]], [[T], [T]])
    report = json.loads((run / "eval-after-test_kinds.json").read_text())
    for task in report["tasks"]:
        del task["failed_runs"]  # an evaluation written before the flags existed
    (run / "eval-after-test_kinds.json").write_text(json.dumps(report))
    goals = heldout_report.main([str(run), "--splits", "test_kinds", "--target-split", "test_kinds"])["targets"]
    assert (
        goals["recovery"]["pooled"]["missing"] == f"{run} has no per-task failed-run flags"
        and not goals["recovery"]["pooled"]["met"]
    )
    assert "has no per-task failed-run flags" in capsys.readouterr().out


def test_a_run_without_its_after_evaluation_is_named(tmp_path: Path, capsys) -> None:
    run = _make_run(tmp_path, "a", [[T, T]], [[T, T]])
    (run / "eval-after-test_kinds.json").unlink()
    with pytest.raises(SystemExit) as exc:
        heldout_report.main([str(run), "--splits", "test_kinds"])
    assert exc.value.code == 2
    assert "eval-after-test_kinds.json is missing" in capsys.readouterr().err


def test_training_success_counts_the_groups_dynamic_sampling_filtered() -> None:
    from mainjob_targets import success_per_step

    records = [
        {"step": 0, "eval/test_instances/pass@1": 0.3},  # an evaluation record is not a step
        {"step": 1, "episode/success_rate": 0.5, "rollout/success_rate": 0.25},  # dynamic sampling filtered groups
        {"step": 2, "episode/success_rate": 0.4},  # a run from before rollout/success_rate was logged
    ]
    assert success_per_step(records) == [0.25, 0.4]
