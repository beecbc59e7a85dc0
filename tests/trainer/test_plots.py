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


def _three_steps() -> list[dict[str, float]]:
    """A newcomer's 3-step run: step 2 trained nothing (every group had equal rewards), no held-out eval, sync mode,
    a text env reporting its own reward components and no code actions."""
    history = []
    for step in (1, 2, 3):
        trained = step != 2
        history.append(
            {
                "step": step,
                "episode/reward_mean": -0.5,
                "episode/reward_std": 0.1,
                "episode/reward_format": -1.0,
                "episode/reward_rooms": 0.1 * step,
                "episode/success_rate": 0.0,
                "episode/turns_mean": 6.0,
                "train/entropy": 7.6 if trained else 0.0,
                "train/abs_log_s_mean": 1e-4 if trained else 0.0,
                "train/clip_frac_seq": 0.01 if trained else 0.0,
                "train/optimizer_steps": 1.0 if trained else 0.0,
                "train/token_lag_mean": 0.0,
                "train/token_lag_max": 0.0,
            }
        )
    return history


def test_only_measured_metrics_are_drawn_and_unmeasured_steps_are_gaps() -> None:
    import math

    import matplotlib.pyplot as plt

    from agentrl.trainer.plots import COMPONENTS, make_figure, panels_for

    history = _three_steps()
    shown, empty = panels_for(history)
    titles = [title for title, _ in shown]
    assert dict(shown)[COMPONENTS] == ["episode/reward_format", "episode/reward_rooms"]
    assert "turns per episode" in titles and "entropy" in titles
    assert "agent behaviour" not in titles and "held-out pass@1" in empty and "async: busy seconds" in empty
    fig = make_figure(history)
    try:
        by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        entropy = by_title["entropy"].lines[0].get_ydata()
        assert entropy[0] == 7.6 and math.isnan(entropy[1]) and entropy[2] == 7.6  # a gap, not 7.6 -> 0 -> 7.6
        notes = [t.get_text() for t in by_title["entropy"].texts]
        assert notes == ["not measured (nothing trained): step 2"]
        ticks = by_title["reward"].get_xticks()
        assert all(float(t).is_integer() for t in ticks)  # 1, 2, 3: not 1.0, 1.5, ...
        assert any("not measured in this run: " in t.get_text() for t in fig.texts)
    finally:
        plt.close(fig)


def test_the_mismatch_panel_says_what_its_numbers_are() -> None:
    import matplotlib.pyplot as plt

    from agentrl.trainer.plots import make_figure

    history = [{"step": step, "audit/abs_mean": 1.3, "episode/reward_mean": 0.5} for step in (1, 2)]
    fig = make_figure(history)
    titles = {ax.get_title().split("\n")[0]: " ".join(ax.get_title().split()) for ax in fig.axes if ax.get_visible()}
    plt.close(fig)
    caption = titles["engine-trainer |delta logprob|"]
    assert "nats per sampled token between the engine's logprob and the trainer's recompute" in caption
    assert titles["reward"] == "reward"  # a plain panel keeps its plain title


def test_the_end_of_a_run_draws_the_plots_once_more_only_for_records_after_the_last_drawing(tmp_path: Path) -> None:
    from agentrl.config.sections import LoggingConfig
    from agentrl.trainer.reporting import RunReporter

    cfg = LoggingConfig(run_root=str(tmp_path), progress=False, wandb_mode="disabled", plot_every=100)
    metrics = {"episode/reward_mean": 0.5, "episode/success_rate": 0.5}
    reporter = RunReporter(tmp_path, cfg, 2, config={})
    reporter.log(1, metrics)
    reporter.log(2, metrics)  # the last step draws
    drawn = (tmp_path / "plots.png").stat().st_mtime_ns
    reporter.close()  # nothing new since: no second drawing
    assert (tmp_path / "plots.png").stat().st_mtime_ns == drawn
    again = RunReporter(tmp_path, cfg, 2, config={}, start_step=2)
    again.log_extra(2, {"eval/test_instances/pass@1": 0.4})  # an evaluation after the last step
    again.close()
    assert (tmp_path / "plots.png").stat().st_mtime_ns > drawn
