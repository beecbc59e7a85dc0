"""bench/studies/compare_arms.py on hand-made run directories: two arms paired by seed and task."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

import compare_arms  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/


def _run(tmp_path: Path, name: str, seed: int, before: list[bool], after: list[bool], success: list[float]) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(f"seed: {seed}\n")
    for phase, passed in (("before", before), ("after", after)):
        tasks = [{"task_id": f"t{i}", "successes": [p]} for i, p in enumerate(passed)]
        (run_dir / f"eval-{phase}-test_instances.json").write_text(json.dumps({"tasks": tasks}))
    steps = [{"step": 0}] + [{"step": i + 1, "episode/success_rate": s} for i, s in enumerate(success)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    return run_dir


def test_the_difference_is_paired_by_seed_and_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = [False, False, False, True]
    # Arm A solves two more tasks than before in seed 0 and one more in seed 1; arm B one more in each.
    a = [
        _run(tmp_path, "a0", 0, before, [True, True, False, True], [0.1, 0.2, 0.5, 0.6]),
        _run(tmp_path, "a1", 1, before, [True, False, False, True], [0.1, 0.1, 0.3, 0.3]),
    ]
    b = [
        _run(tmp_path, "b1", 1, before, [False, False, True, True], [0.2, 0.2, 0.2, 0.2]),  # given out of order
        _run(tmp_path, "b0", 0, before, [True, False, False, True], [0.1, 0.1, 0.2, 0.2]),
    ]
    out = tmp_path / "cmp.json"
    arms = ["--arm", "A=" + ",".join(map(str, a)), "--arm", "B=" + ",".join(map(str, b))]
    result = compare_arms.main([*arms, "--json", str(out)])
    seed0, seed1 = result["per_seed"]
    assert (seed0["seed"], seed0["gain_a"], seed0["gain_b"]) == (0, 0.5, 0.25)
    assert seed0["difference"]["mean"] == pytest.approx(0.25)  # task t1: +1 against 0
    assert seed1["difference"]["mean"] == pytest.approx(0.0)  # t0 against t2: different tasks, same count
    assert seed0["training_rise_a"] == pytest.approx(0.5) and seed0["training_rise_b"] == pytest.approx(0.1)
    assert result["over_seeds"]["mean"] == pytest.approx(0.125) and result["over_seeds"]["n"] == 2
    assert result["over_tasks"]["n"] == 4
    assert "A minus B, held-out gain: +0.125" in capsys.readouterr().out
    assert json.loads(out.read_text())["a"] == "A"


def test_arms_with_different_seeds_are_refused(tmp_path: Path) -> None:
    a = _run(tmp_path, "a0", 0, [False], [True], [0.1, 0.2])
    b = _run(tmp_path, "b1", 1, [False], [True], [0.1, 0.2])
    with pytest.raises(SystemExit, match="different seeds"):
        compare_arms.compare([a], [b], "test_instances")
