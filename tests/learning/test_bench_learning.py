"""bench/studies/bench_learning.py on the tiny job: the baseline and the all-speed-ups variant train and are
evaluated,
a variant the config rejects is skipped with its reason (as the async slot is until issue 14 lands), and a
rerun skips finished runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from learning_helpers import ROOT, read_json, run_script

pytestmark = [pytest.mark.slow, pytest.mark.bench]
sys.path.insert(0, str(ROOT / "bench" / "studies"))
from bench_learning import VARIANTS  # noqa: E402


def test_bench_learning_runs_resumes_and_plots(tiny_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    variants = tmp_path / "variants.json"
    chosen = {name: VARIANTS[name] for name in ("exact_sync", "all_start")}
    variants.write_text(json.dumps({**chosen, "future": ["trainer.mode_of_the_future=async"]}))
    args = ["--config", str(tiny_job), "--variants-file", str(variants), "--seeds", "3", "--out", str(out)]
    run_script("studies/bench_learning.py", *args)
    report = read_json(out / "bench_learning.json")
    assert set(report["summary"]) == {"exact_sync", "all_start"}
    assert "mode_of_the_future" in report["skipped"]["future"]  # named with the config's own error
    run = read_json(out / "runs" / "all_start-s3.json")
    assert "rollout.batch_order=start" in run["overrides"] and "seed=3" in run["overrides"]
    assert run["trained"] and all(row["tokens"] > 0 for row in run["trained"])
    assert set(run["after"]) == set(run["before"]) == {"test_instances"}
    cell = report["summary"]["all_start"]["heldout_pass@1"]["test_instances"]
    assert cell["gain_minus_baseline"]["n"] == 1  # paired with the baseline's run of the same seed
    assert (out / "bench_learning.png").stat().st_size > 10_000
    stamp = (out / "runs" / "exact_sync-s3.json").stat().st_mtime_ns
    stdout = run_script("studies/bench_learning.py", *args)  # everything is done: nothing runs again
    assert "[bench] exact_sync seed 3" not in stdout
    assert (out / "runs" / "exact_sync-s3.json").stat().st_mtime_ns == stamp
