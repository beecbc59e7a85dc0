"""The pictures in the README and docs/img: the architecture diagram names only modules that exist, and
bench/studies/plot_mainjob.py draws the main job's picture from run directories (writing the numbers it drew) or
from the checked-in record of the three-seed result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench" / "studies"))

import plot_architecture  # noqa: E402
import plot_mainjob  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_every_module_the_architecture_diagram_names_exists() -> None:
    missing = [path for path in plot_architecture.all_modules() if not (ROOT / path).exists()]
    assert not missing, f"scripts/plot_architecture.py names modules that do not exist: {missing}"


def test_the_checked_in_pictures_are_pngs_and_the_record_names_its_source() -> None:
    for name in ("architecture.png", "mainjob.png"):
        assert (ROOT / "docs" / "img" / name).read_bytes()[:8] == PNG_MAGIC, name
    record = json.loads((ROOT / "docs" / "img" / "mainjob.json").read_text(encoding="utf-8"))
    assert record["source"].startswith("docs/results/main-job.md") and record["commit"] and record["command"]
    plot_mainjob.check_record(record)


@pytest.mark.slow
def test_the_main_job_picture_is_drawn_from_the_checked_in_record(tmp_path: Path) -> None:
    out = tmp_path / "mainjob.png"
    plot_mainjob.main(["--from-json", str(ROOT / "docs" / "img" / "mainjob.json"), "--out", str(out)])
    assert out.read_bytes()[:8] == PNG_MAGIC


def _write_eval(run_dir: Path, phase: str, split: str, successes: list[bool], recovery: float) -> None:
    """An eval report as ``agentrl train`` writes it (the fields bench/studies/heldout_report.py reads)."""
    report = {
        "samples": 1,
        "pass_at_k": {"1": sum(successes) / len(successes)},
        "num_tasks": len(successes),
        "duration_s": 5.0,
        "tasks": [{"task_id": f"t{i}", "successes": [s]} for i, s in enumerate(successes)],
        "behaviour": {"turns_mean": 2.5, "tested_before_submit_frac": 0.75, "recovery_frac": recovery},
    }
    (run_dir / f"eval-{phase}-{split}.json").write_text(json.dumps(report), encoding="utf-8")


def _make_run(tmp_path: Path, name: str, after_instances: list[bool]) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    _write_eval(run_dir, "before", "test_instances", [True, False, False, False], 0.0)
    _write_eval(run_dir, "after", "test_instances", after_instances, 0.5)
    _write_eval(run_dir, "before", "test_kinds", [True, False], 0.0)
    _write_eval(run_dir, "after", "test_kinds", [True, False], 0.0)
    steps = [{"step": 1, "episode/success_rate": 0.25, "rollout/signal_groups": 3.0, "perf/step_s": 10.0}]
    steps.append({"step": 2, "episode/success_rate": 0.5, "rollout/signal_groups": 5.0, "perf/step_s": 10.0})
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n", encoding="utf-8")
    return run_dir


@pytest.mark.slow
def test_run_directories_give_a_picture_and_the_record_it_was_drawn_from(tmp_path: Path) -> None:
    runs = [_make_run(tmp_path, "seed0", [True, True, False, False]), _make_run(tmp_path, "seed1", [True] * 4)]
    record_path, out = tmp_path / "record.json", tmp_path / "picture.png"
    args = [*map(str, runs), "--commit", "abc1234", "--json", str(record_path), "--out", str(out)]
    record = plot_mainjob.main(args)
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert json.loads(record_path.read_text(encoding="utf-8")) == record
    first = record["runs"][0]
    assert (first["run"], record["steps"], record["tasks"], record["commit"]) == (
        "seed0",
        2,
        {"test_instances": 4, "test_kinds": 2},
        "abc1234",
    )
    inst = first["splits"]["test_instances"]
    assert (inst["before"], inst["after"], inst["behaviour"]["recovery_frac"]) == (0.25, 0.5, [0.0, 0.5])
    assert inst["gain"]["mean"] == pytest.approx(0.25)
    assert first["success_per_step"] == [0.25, 0.5] and first["signal_groups_per_step"] == [3.0, 5.0]
    assert record["runs"][1]["splits"]["test_instances"]["after"] == 1.0
    # the written record redraws the same picture without the runs
    plot_mainjob.main(["--from-json", str(record_path), "--out", str(tmp_path / "again.png")])


def test_a_record_without_a_split_is_refused_with_the_fix() -> None:
    record = json.loads((ROOT / "docs" / "img" / "mainjob.json").read_text(encoding="utf-8"))
    del record["runs"][1]["splits"]["test_kinds"]
    with pytest.raises(plot_mainjob.RecordError, match="seed 1.*test_kinds"):
        plot_mainjob.check_record(record)
    with pytest.raises(SystemExit):
        plot_mainjob.main(["--out", "x.png"])  # neither run directories nor --from-json
