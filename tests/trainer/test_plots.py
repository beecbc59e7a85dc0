"""The run's PNG: every panel family renders, and legends keep same-named metrics of different sources apart."""

from __future__ import annotations

from pathlib import Path

from agentrl.trainer.plots import PANELS, _label, write_plots


def test_plots_render_training_mismatch_heldout_and_behaviour_panels(tmp_path: Path) -> None:
    history = [{"step": step, **{key: 0.1 * step for _, keys in PANELS for key in keys}} for step in range(0, 4)]
    path = tmp_path / "plots.png"
    write_plots(history, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp*"))  # written via a temp file, then renamed
    titles = [title for title, _ in PANELS]
    assert "held-out pass@1" in titles and "agent behaviour" in titles and "clipped before the update" in titles


def test_legend_labels_are_distinct_within_each_panel() -> None:
    for title, keys in PANELS:
        labels = [_label(key) for key in keys]
        assert len(set(labels)) == len(labels), (title, labels)
    assert _label("eval/test_kinds/pass@1") == "test_kinds"
    assert _label("audit/abs_mean") != _label("mismatch/abs_mean")
