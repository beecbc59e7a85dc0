"""Run reporting: metrics.jsonl, wandb (offline unless an API key is set), a rich progress bar, PNG plots.

Invariant: only rank 0 reports; ``metrics.jsonl`` holds one JSON object per finished step and is
the source the plots and ``--resume`` (which truncates steps after the checkpoint) read back.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import LoggingConfig
from agentrl.trainer.dry_run_checks import first_step_clip_note
from agentrl.trainer.plots import write_plots
from agentrl.util.disk import write_text_durably

METRICS_FILE = "metrics.jsonl"


def progress_line(step: int, total: int, m: dict[str, float]) -> str:
    """'step 7/40 reward 0.41 solved 38% clip 1.9% |log s| 2e-04 partial 6 (<=1 behind) dropped 0% 412 tok/s
    signal 5 filtered 2' (signal: the batch's groups with a non-zero advantage).

    Async runs add 'lag 1.0/1 stale 0% overlap 3.2s': mean/max version lag of the trained tokens, the
    fraction of tokens dropped for staleness, and the seconds the engine and the trainer were busy at once.
    """
    line = (
        f"step {step}/{total} reward {m.get('episode/reward_mean', 0.0):.2f} "
        f"solved {100 * m.get('rollout/success_rate', m.get('episode/success_rate', 0.0)):.0f}% "
        f"clip {100 * m.get('train/clip_frac_seq', 0.0):.1f}% |log s| {m.get('train/abs_log_s_mean', 0.0):.0e} "
        f"partial {m.get('rollout/groups_carried', 0.0):.0f} (<={m.get('rollout/staleness_max', 0.0):.0f} behind) "
        f"dropped {100 * m.get('rollout/drop_rate', 0.0):.0f}% "
        f"{m.get('perf/tokens_per_s', 0.0):.0f} tok/s"
    )
    if "rollout/signal_groups" in m:  # groups of the batch that move the policy; filtered: replaced (dynamic sampling)
        line += f" signal {m['rollout/signal_groups']:.0f} filtered {m.get('rollout/groups_filtered', 0.0):.0f}"
    if "perf/overlap_s" in m:
        line += (
            f" lag {m.get('train/token_lag_mean', 0.0):.1f}/{m.get('train/token_lag_max', 0.0):.0f} "
            f"stale {100 * m.get('async/stale_dropped_frac', 0.0):.0f}% overlap {m['perf/overlap_s']:.1f}s"
        )
    return line


def step_line(step: int, total: int, m: dict[str, float]) -> str:
    """The whole of one step for a log file (output that is not a terminal, where no live bar shows): the
    progress line, then the mean turns per episode and where the step's seconds went."""
    times = ", ".join(
        f"{name} {m[key]:.1f} s"
        for name, key in (("rollout", "rollout/wall_s"), ("update", "train/time_s"), ("sync", "perf/sync_s"))
        if key in m
    )
    return (
        f"{progress_line(step, total, m)} turns {m.get('episode/turns_mean', 0.0):.1f} "
        f"time {m.get('perf/step_s', 0.0):.1f} s" + (f" ({times})" if times else "")
    )


def step_notes(step: int, m: dict[str, float]) -> list[str]:
    """Console lines for a step that did something the metrics alone would hide (e.g. trained nothing)."""
    notes = []
    if m.get("train/optimizer_steps", 1.0) == 0:
        notes.append(
            f"step {step}: nothing was trained (0 optimizer steps): every row had zero advantage "
            f"({m.get('episode/groups_all_equal', 0.0):.0f} groups had equal rewards, which carry no signal); use "
            "tasks the policy sometimes solves, a larger rollout.group_size or a higher rollout.temperature"
        )
    return notes


def wandb_sync_hint(run_dir: Path) -> str:
    """The command that uploads every job of an offline run: each job (a resume, a job after a kill) writes its
    own ``wandb/offline-run-*`` folder under the one run id, and ``wandb sync`` takes them all."""
    return (
        f"wandb is offline; to upload every job of this run (resumes and killed jobs included): "
        f"wandb sync {run_dir / 'wandb'}/offline-run-*"
    )


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every step record of ``metrics.jsonl`` (empty when absent); a torn last line is ignored."""
    path = run_dir / METRICS_FILE
    records: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a kill mid-write leaves at most one torn line at the end
    return records


class RunReporter:
    """Writes each step's metrics to every sink; a no-op on ranks other than 0."""

    def __init__(
        self,
        run_dir: Path,
        cfg: LoggingConfig,
        total_steps: int,
        *,
        config: dict[str, Any],
        start_step: int = 0,
        enabled: bool = True,
    ) -> None:
        self.run_dir, self.cfg, self.total, self.enabled = run_dir, cfg, total_steps, enabled
        self.history = [r for r in read_metrics(run_dir) if r.get("step", 0) <= start_step] if enabled else []
        if enabled:  # steps after the checkpoint will be redone: drop them so the file equals an uninterrupted run's
            text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.history)
            write_text_durably(run_dir / METRICS_FILE, text)  # a kill mid-rewrite must not truncate the history
        algorithm = config.get("algorithm")
        self._proximal = AlgorithmConfig.model_validate(algorithm).off_policy.proximal if algorithm else "?"
        self._logged_a_step = False  # the first step of this job checks how much the loss clipped
        self._plotted = -1  # records in the last plots.png (-1: none drawn by this job)
        self._wandb = self._init_wandb(config) if enabled else None
        # the live bar only on a terminal: redirected to a file it shows one line, cut at 80 columns, at the end
        live = enabled and cfg.progress and sys.stdout.isatty()
        self._progress, self._task = self._init_progress(start_step) if live else (None, None)

    def _init_wandb(self, config: dict[str, Any]) -> Any:
        mode = self.cfg.wandb_mode
        if mode == "auto":
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
        if mode == "disabled" or self.cfg.wandb_project is None:
            return None
        try:
            import uuid

            import wandb

            id_file = self.run_dir / "wandb_id"
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.write_text(run_id)
            run = wandb.init(
                project=self.cfg.wandb_project,
                dir=str(self.run_dir),
                mode=mode,
                id=run_id,
                resume="allow",
                config=config,
                name=self.run_dir.name,
            )
        except Exception as exc:  # wandb failing (no service, bad key) must not stop training; metrics.jsonl has it all
            warnings.warn(f"wandb disabled for this run: {exc}", stacklevel=2)
            return None
        if mode == "offline":  # said now, so a killed job has said it too; every job of the run adds a folder
            print(f"[train] {wandb_sync_hint(self.run_dir)}", flush=True)
        return run

    def _init_progress(self, start_step: int) -> tuple[Any, Any]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        progress.start()
        return progress, progress.add_task("starting", total=self.total, completed=start_step)

    def log(self, step: int, metrics: dict[str, float], *, plot: bool = True) -> None:
        """Record one finished step everywhere; refresh plots every ``plot_every`` steps unless ``plot`` is False."""
        if not self.enabled:
            return
        self.log_extra(step, metrics)
        notes = step_notes(step, metrics)
        if not self._logged_a_step:
            self._logged_a_step = True
            notes += filter(None, [first_step_clip_note(step, metrics, self._proximal)])
        for note in notes:
            if self._progress is not None:  # printed above the live bar
                self._progress.console.print(f"[train] {note}", markup=False, highlight=False)
            else:
                print(f"[train] {note}", flush=True)
        if self._progress is not None:
            self._progress.update(self._task, completed=step, description=progress_line(step, self.total, metrics))
        else:  # a log file or progress: false: one full line per step, never cut
            print(f"[train] {step_line(step, self.total, metrics)}", flush=True)
        if plot:
            self.plot(step)

    def plot(self, step: int) -> None:
        """Refresh the PNG plots when ``step`` is a multiple of ``plot_every`` or the last step."""
        if self.enabled and (step % self.cfg.plot_every == 0 or step == self.total):
            self._write_plots()

    def _write_plots(self) -> None:
        write_plots(self.history, self.run_dir / "plots.png")
        self._plotted = len(self.history)

    def log_extra(self, step: int, metrics: dict[str, float]) -> None:
        """Record metrics that are not a training step (held-out evaluation) in metrics.jsonl and wandb."""
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        self.history.append(record)
        with (self.run_dir / METRICS_FILE).open("a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        """Flush plots and stop the progress bar and wandb."""
        if not self.enabled:
            return
        if self.history and len(self.history) != self._plotted:  # records since the last drawing
            self._write_plots()
        if self._progress is not None:
            self._progress.stop()
        if self._wandb is not None:
            offline = self._wandb.settings.mode == "offline"
            self._wandb.finish()
            if offline:  # after wandb's own hint, which names only this job's folder
                print(f"[train] {wandb_sync_hint(self.run_dir)}", flush=True)
