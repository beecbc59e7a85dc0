"""The architecture diagram of one training step (docs/img/architecture.png): tasks -> env -> engine -> episode
-> advantages -> loss -> update -> weights, each box naming the modules that do it. A test checks that every
module named here exists, so the picture cannot drift from the code silently.

    .venv/bin/python scripts/plot_architecture.py --out docs/img/architecture.png
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, NamedTuple


class Stage(NamedTuple):
    """One box: what happens, the modules (repository paths) that do it, and a line on how."""

    title: str
    modules: tuple[str, ...]
    note: str


# Row 1 is one turn of one episode (the rollout runs G episodes per task concurrently, turn after turn);
# row 2 is the update that ends a step.
ROLLOUT = (
    Stage("tasks", ("agentrl/rollout/dataset.py", "envs/code_tasks/"), "task ids in a seeded, resumable order"),
    Stage(
        "env.reset / env.step",
        ("agentrl/env/base.py", "envs/code_agent/env.py", "sandboxes/", "envs/code_exec/grading/"),
        "messages out, the model's text in;\ncode runs in a sandbox, a judge grades",
    ),
    Stage(
        "chat + token ledger",
        ("agentrl/chat/assembler.py", "agentrl/trajectory/ledger.py"),
        "renders each turn incrementally;\nhistory is never re-tokenized",
    ),
    Stage(
        "engine.generate",
        ("agentrl/engines/base.py", "agentrl/engines/embedded/", "agentrl/engines/sglang/http.py"),
        "token ids + logprobs +\npolicy version per token",
    ),
)
TRAIN = (
    Stage(
        "Episode",
        ("agentrl/trajectory/episode.py", "agentrl/rollout/buffer.py"),
        "tokens, logprobs, versions,\nrewards; partials in SQLite",
    ),
    Stage("advantages", ("agentrl/algos/advantages.py",), "per turn, normalised\nwithin each group"),
    Stage(
        "loss",
        ("agentrl/algos/losses.py", "agentrl/algos/offpolicy.py"),
        "GSPO-token; the engine's\nlogprobs as pi_old",
    ),
    Stage("update", ("agentrl/trainer/batch.py", "agentrl/trainer/update.py"), "packed micro-batches,\nAdamW"),
    Stage("weights -> engine", ("agentrl/trainer/sync.py",), "shared storage, disk\nor tensors, versioned"),
    Stage(
        "checkpoint",
        ("agentrl/trainer/step_end.py", "agentrl/trainer/checkpoint.py"),
        "model, optimizer, RNG,\nbuffer; atomic",
    ),
)
DRIVERS = ("agentrl/rollout/orchestrator.py", "agentrl/rollout/runner.py", "agentrl/trainer/loop.py")


def all_modules() -> list[str]:
    """Every repository path the diagram names."""
    return [m for stage in (*ROLLOUT, *TRAIN) for m in stage.modules] + list(DRIVERS)


WIDTH, HEIGHT = 2.35, 1.75  # a box, in axis units
TOP, BOTTOM = 4.4, 0.9  # the rows' lower edges


def _box(ax: Any, x: float, y: float, stage: Stage, colour: str) -> None:
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), WIDTH, HEIGHT, boxstyle="round,pad=0.05", fc=colour, ec="#444"))
    middle = x + WIDTH / 2
    ax.text(middle, y + HEIGHT - 0.22, stage.title, ha="center", va="center", fontsize=10.5, weight="bold")
    modules = "\n".join(stage.modules)
    ax.text(middle, y + HEIGHT - 0.5, modules, ha="center", va="top", fontsize=7, family="monospace", color="#1a3d6d")
    ax.text(middle, y + 0.08, stage.note, ha="center", va="bottom", fontsize=7.5, style="italic")


def _arrow(ax: Any, start: tuple[float, float], end: tuple[float, float], both: bool = False, **kw: Any) -> None:
    from matplotlib.patches import FancyArrowPatch

    style = "<|-|>" if both else "-|>"
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=14, color="#333", **kw))


def _rollout_row(ax: Any) -> list[float]:
    """Row 1, one turn: tasks -> env <-> chat <-> engine, framed as what runs per episode; returns the x's."""
    from matplotlib.patches import FancyBboxPatch

    xs = [0.4 + i * 3.9 for i in range(len(ROLLOUT))]
    for x, stage in zip(xs, ROLLOUT):
        _box(ax, x, TOP, stage, "#e8f1fb")
    for i in range(len(ROLLOUT) - 1):
        _arrow(ax, (xs[i] + WIDTH + 0.08, TOP + HEIGHT / 2), (xs[i + 1] - 0.08, TOP + HEIGHT / 2), both=i > 0)
    frame = (xs[1] - 0.25, TOP - 0.3), xs[3] + WIDTH - xs[1] + 0.5, HEIGHT + 0.55
    ax.add_patch(FancyBboxPatch(*frame, boxstyle="round,pad=0.05", fc="none", ec="#7a9cc6", ls="--"))
    label = f"per turn, G episodes per task at once: {DRIVERS[0]}, {DRIVERS[1]}"
    ax.text(xs[1] - 0.2, TOP + HEIGHT + 0.32, label, fontsize=8.5, color="#2d5a8c")
    return xs


def _train_row(ax: Any) -> list[float]:
    """Row 2, the end of a step: Episode -> advantages -> loss -> update -> weights -> checkpoint."""
    xs = [0.2 + i * 2.65 for i in range(len(TRAIN))]
    for x, stage in zip(xs, TRAIN):
        _box(ax, x, BOTTOM, stage, "#fbf0e4")
    for i in range(len(TRAIN) - 1):
        _arrow(ax, (xs[i] + WIDTH + 0.04, BOTTOM + HEIGHT / 2), (xs[i + 1] - 0.04, BOTTOM + HEIGHT / 2))
    ax.text(2.9, BOTTOM + HEIGHT + 0.3, f"then the update, sync or async: {DRIVERS[2]}", fontsize=8.5, color="#8c5a2d")
    return xs


def draw(out: Path) -> None:
    """Two rows of boxes joined by arrows; written to a temp file, then renamed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(16, 6.6))
    ax.set(xlim=(0, 16), ylim=(0.6, 7.2))
    ax.axis("off")
    top, bottom = _rollout_row(ax), _train_row(ax)
    # the finished episodes go down to training; the new weights go back up to the engine
    down = ((top[1] + 0.3, TOP - 0.32), (bottom[0] + WIDTH / 2, BOTTOM + HEIGHT + 0.06))
    _arrow(ax, *down, connectionstyle="arc3,rad=0.15")
    up = ((bottom[4] + WIDTH / 2, BOTTOM + HEIGHT + 0.06), (top[3] + WIDTH / 2, TOP - 0.32))
    _arrow(ax, *up, connectionstyle="arc3,rad=-0.1")
    ax.text(1.75, 3.55, "finished groups\n(episodes)", fontsize=8, ha="left", color="#333")
    ax.text(13.3, 3.55, "new weights,\nversion k", fontsize=8, ha="left", color="#333")
    title = "One training step in agentrl (modules named are the files that do each part)"
    ax.text(0.2, 6.95, title, fontsize=12, weight="bold")
    fig.tight_layout()
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> None:
    """Draw the diagram."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/img/architecture.png"))
    draw(parser.parse_args(argv).out)


if __name__ == "__main__":
    main()
