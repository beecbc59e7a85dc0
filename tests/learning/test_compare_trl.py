"""bench/studies/compare_trl.py end to end on the tiny job: both sides train and are evaluated, TRL saw agentrl's
prompt ids token for token, and the report has every row of the results table (docs/results/single-turn.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from learning_helpers import read_json, run_script

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_compare_trl_runs_both_sides_on_identical_prompt_ids(tiny_job: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="the comparison needs the optional extra: pip install -e '.[compare]'")
    out = tmp_path / "compare"
    stdout = run_script("studies/compare_trl.py", "--config", str(tiny_job), "--out", str(out))
    report = read_json(out / "compare_trl.json")
    trl, ours = report["runs"]["trl"]["train"], report["runs"]["agentrl"]["train"]
    # every prompt of the single step went through TRL's tokenization and matched agentrl's ids
    assert trl["prompt_ids_checked"] == 2 * 2
    assert len(trl["step_s"]) == len(ours["step_s"]) == 1
    for side in ("agentrl", "trl"):
        summary = report["summary"][side]
        assert summary["peak_rss_gb"] > 0.1 and summary["steps_total_s"] > 0
        assert set(summary["heldout_pass@1"]) == {"test_instances"}
        assert (
            summary["heldout_pass@1"]["test_instances"]["before"]
            == report["before"]["splits"]["test_instances"]["pass@1"]
        )
        assert Path(report["runs"][side]["train"]["model_dir"], "config.json").is_file()
    assert "| peak RSS of the training process (GB) |" in stdout and "held-out test_instances pass@1" in stdout


def test_compare_trl_refuses_a_multi_turn_config(tiny_job: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="the comparison needs the optional extra: pip install -e '.[compare]'")
    with pytest.raises(AssertionError, match="single-turn"):
        run_script(
            "studies/compare_trl.py", "--config", str(tiny_job), "-o", "env.kwargs.max_turns=3", "--out", str(tmp_path)
        )


def test_compare_trl_refuses_a_loss_trl_does_not_run(tiny_job: Path, tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="the comparison needs the optional extra: pip install -e '.[compare]'")
    with pytest.raises(AssertionError, match="algorithm.loss is 'grpo'; set algorithm.loss=gspo_token"):
        run_script(
            "studies/compare_trl.py", "--config", str(tiny_job), "-o", "algorithm.loss=grpo", "--out", str(tmp_path)
        )
