"""``agentrl rollout CONFIG --out FILE.jsonl [--resume RUN_DIR]``: collect trajectories without training.

Each step's complete groups (and dropped groups) are appended to the JSONL file, fsynced, and only
then committed in the buffer; on ``--resume`` groups already in the file are not written again,
so a job killed at any moment still yields every task exactly once. Committed groups then move to
the trajectory archive (``RUN_DIR/trajectories``), as in training, so the buffer keeps only what a
resume needs and does not grow with the job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLError
from agentrl.util.jsonl import jsonl_lines


def register(subparsers: Any) -> None:
    """Add the ``rollout`` subcommand."""
    parser = subparsers.add_parser(
        "rollout", help="Collect trajectories (no training) into a JSONL file.", description=__doc__
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The rollout command's arguments (shared with ``python -m agentrl.cli.rollout``)."""
    parser.add_argument("config", help="Run config YAML (model, engine, env, rollout sections).")
    parser.add_argument("overrides", nargs="*", help="Dotted overrides, e.g. rollout.group_size=2.")
    parser.add_argument("--out", required=True, help="JSONL file the episodes are appended to (one Episode per line).")
    parser.add_argument("--resume", metavar="RUN_DIR", help="Continue the run in RUN_DIR from its rollout buffer.")
    parser.add_argument(
        "--steps", type=int, default=None, help="Stop after this many steps (default: until the dataset is used up)."
    )
    parser.add_argument("--epochs", type=int, default=1, help="Passes over the env's task set (default 1).")
    parser.add_argument(
        "--num-tasks", type=int, default=None, help="Tasks to use (required for envs without task ids)."
    )


def _run_dir(cfg: Any, config_path: str, resume: str | None) -> Path:
    from agentrl.job.rundir import new_run_dir, resumed_run_dir
    from agentrl.rollout.buffer import BUFFER_FILE  # lazy, like every heavy import of the CLI frame

    if resume is not None:
        return resumed_run_dir(resume, needs=BUFFER_FILE, command="agentrl rollout")
    return new_run_dir(cfg.logging, Path(config_path).stem)


def _written_groups(out: Path) -> set[str]:
    """Group ids already in ``out``; a torn last line (killed mid-write) is cut off first."""
    if not out.exists():
        return set()
    data = out.read_bytes()
    keep = data[: data.rfind(b"\n") + 1]
    if len(keep) != len(data):
        with out.open("r+b") as handle:
            handle.truncate(len(keep))
    return {json.loads(line)["group_id"] for _, line in jsonl_lines(keep.decode("utf-8"))}


async def collect(args: argparse.Namespace) -> Path:
    """Run the rollout job; returns the run directory."""
    from agentrl.cli.model_path import with_run_model
    from agentrl.job.loader import load_config
    from agentrl.job.stack import build_rollout_stack, load_run_tokenizer
    from agentrl.rollout.archive import TrajectoryArchive

    cfg = with_run_model(load_config(args.config, args.overrides), "rollout")
    run_dir = _run_dir(cfg, args.config, args.resume)
    print(f"[rollout] run directory: {run_dir}", flush=True)
    (run_dir / "rollout_config.json").write_text(cfg.model_dump_json(indent=2))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = _written_groups(out)
    stack = build_rollout_stack(
        cfg,
        run_dir,
        load_run_tokenizer(cfg),
        epochs=args.epochs,
        num_tasks=args.num_tasks,
        require_tasks="pass --num-tasks N to collect N tasks",
    )
    try:
        await _loop(stack.orchestrator, TrajectoryArchive(run_dir), out, written, args.steps)
    finally:
        await stack.close()
    return run_dir


async def _loop(orchestrator: Any, archive: Any, out: Path, written: set[str], max_steps: int | None) -> None:
    buffer = orchestrator.buffer
    step = (buffer.last_step() or 0) + 1
    done_steps = 0
    while max_steps is None or done_steps < max_steps:
        batch = await orchestrator.collect_step(step)
        lines = [
            e.model_dump_json() for group in batch.groups + batch.dropped for e in group if e.group_id not in written
        ]
        with out.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        written.update(group[0].group_id for group in batch.groups + batch.dropped if group)
        orchestrator.commit_step(step)
        archive.archive(buffer, step)  # committed and dropped groups leave the buffer (it would grow without bound)
        m = batch.metrics
        print(
            f"[rollout] step {step}: {len(batch.groups)} groups, {len(batch.dropped)} dropped, "
            f"{int(m.get('rollout/episodes_aborted', 0))} partial, {int(m.get('rollout/episodes_resumed', 0))} "
            f"resumed, {int(m.get('rollout/episodes_restarted', 0))} restarted, "
            f"{m.get('rollout/tokens_per_s', 0.0):.0f} tok/s",
            flush=True,
        )
        step += 1
        done_steps += 1
        if batch.exhausted:
            return


def run_command(args: argparse.Namespace) -> int:
    """Entry point of the subcommand: 0 on success, 1 with a one-line error."""
    from agentrl.rollout.buffer import BUFFER_FILE

    try:
        run_dir = asyncio.run(collect(args))
    except AgentRLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"[rollout] done: episodes in {args.out}, buffer in {run_dir / BUFFER_FILE}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m agentrl.cli.rollout`` (same arguments as ``agentrl rollout``)."""
    parser = argparse.ArgumentParser(prog="agentrl rollout", description=__doc__)
    add_arguments(parser)
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
