"""``agentrl inspect RUN_DIR_OR_FILE [--step N]``: print episodes turn by turn.

Reads a run directory's rollout buffer (``rollout_buffer.sqlite``), the buffer file itself, or a
JSONL file of episodes (``agentrl rollout --out``). Shows per turn the model's text, the env's
reply, reward, token count, the policy versions that produced it, partial/resumed/errors, and the
reward-hack flags an env raised (``--flagged`` keeps only flagged episodes).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError
from agentrl.trajectory import Episode, TurnRecord


def register(subparsers: Any) -> None:
    """Add the ``inspect`` subcommand."""
    parser = subparsers.add_parser(
        "inspect", help="Print episodes of a run directory or JSONL file turn by turn.", description=__doc__
    )
    parser.add_argument("source", help="Run directory, rollout_buffer.sqlite, or episodes .jsonl file.")
    parser.add_argument("--step", type=int, default=None, help="Only groups handed out (trained) at this step.")
    parser.add_argument(
        "--state", default=None, help="Only groups in this buffer state: inflight, ready, handed, trained, dropped."
    )
    parser.add_argument("--limit", type=int, default=20, help="Most episodes to print (default 20).")
    parser.add_argument("--chars", type=int, default=400, help="Most characters of each message to print.")
    parser.add_argument(
        "--flagged", action="store_true", help="Only episodes with reward-hack flags (info['hack_flags'])."
    )
    parser.set_defaults(func=run_command)


def load_episodes(
    source: str | Path, *, step: int | None = None, state: str | None = None
) -> list[tuple[str, Episode]]:
    """``(label, episode)`` pairs from a run directory, buffer file or JSONL file."""
    from agentrl.rollout.archive import TrajectoryArchive  # lazy: `agentrl --help` stays fast
    from agentrl.rollout.buffer import BUFFER_FILE, RolloutBuffer

    path = Path(source)
    if path.is_dir():
        path = path / BUFFER_FILE
    if not path.exists():
        raise ConfigError(
            f"{str(source)!r} does not exist; pass a run directory, its {BUFFER_FILE}, or an episodes .jsonl file"
        )
    if path.suffix in (".jsonl", ".json"):
        episodes = [
            Episode.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        return [("file", e) for e in episodes]
    buffer = RolloutBuffer(path)
    try:
        groups = buffer.load_groups(("inflight", "ready", "handed", "trained", "dropped"))
    finally:
        buffer.close()
    archived = TrajectoryArchive(path.parent).load_groups()  # trained/dropped groups of finished steps
    in_buffer = {g.group_id for g in groups}
    groups = [g for g in archived if g.group_id not in in_buffer] + groups
    if step is not None:
        groups = [g for g in groups if g.step == step and g.state in ("handed", "trained")]
    if state is not None:
        groups = [g for g in groups if g.state == state]
    return [(f"{g.state}" + (f" @ step {g.step}" if g.step is not None else ""), e) for g in groups for e in g.episodes]


def _versions(episode: Episode, turn: int) -> str:
    found = sorted(
        {v for s in episode.segments for v, t, m in zip(s.versions, s.turn_ids, s.loss_mask) if m and t == turn}
    )
    if not found:
        return "-"
    return f"v{found[0]}" if len(found) == 1 else f"v{found[0]}..v{found[-1]}"


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else f"{text[:chars]}... [{len(text) - chars} more chars]"


def _header(label: str, e: Episode) -> str:
    sampled = sum(s.num_sampled for s in e.segments)
    total = sum(len(s.input_ids) for s in e.segments)
    reward = "-" if e.final_reward is None else f"{e.final_reward:.3f}"
    resumed = f"  resumed x{e.resumed}" if e.resumed else ""
    flagged = f"\nHACK SUSPECT: {'; '.join(e.hack_flags)}" if e.hack_flags else ""
    return (
        f"episode {e.episode_id[:12]}  task {e.task_id}  group {e.group_id}  [{label}]\n"
        f"status {e.status}  reward {reward}  turns {len(e.turns)}  tokens {sampled} sampled / {total} total  "
        f"versions min {e.min_version}{resumed}{flagged}"
    )


def _turn_lines(e: Episode, turn: TurnRecord, chars: int) -> list[str]:
    reward = "not stepped" if turn.reward is None else f"reward {turn.reward:.3f}"
    partial = "  (partial turn)" if turn.reward is None and e.status == "partial" else ""
    lines = [
        f"  turn {turn.index}  {turn.num_tokens} tokens  {_versions(e, turn.index)}  finish {turn.finish_reason}  "
        f"{reward}{partial}"
    ]
    lines.append(f"    assistant: {_clip(turn.action, chars)!r}")
    lines.extend(f"    {m.get('role', '?')}: {_clip(str(m.get('content', '')), chars)!r}" for m in turn.env_messages)
    if turn.info.get("hack_flags"):
        lines.append(f"    hack flags: {turn.info['hack_flags']}")
    return lines


def render(pairs: list[tuple[str, Episode]], *, limit: int = 20, chars: int = 400) -> str:
    """The readable text of up to ``limit`` episodes."""
    blocks = []
    for label, e in pairs[:limit]:
        lines = [_header(label, e)]
        opening = e.messages[
            : next((i for i, m in enumerate(e.messages) if m.get("role") == "assistant"), len(e.messages))
        ]
        lines.extend(f"  {m.get('role', '?')}: {_clip(str(m.get('content', '')), chars)!r}" for m in opening)
        for turn in e.turns:
            lines.extend(_turn_lines(e, turn, chars))
        if e.error:
            lines.append(f"  ERROR: {e.error}")
        blocks.append("\n".join(lines))
    if len(pairs) > limit:
        blocks.append(f"... {len(pairs) - limit} more episodes (raise --limit)")
    return "\n\n".join(blocks) if blocks else "no episodes"


def run_command(args: argparse.Namespace) -> int:
    """Print the episodes (rich console when available)."""
    pairs = load_episodes(args.source, step=args.step, state=args.state)
    if args.flagged:
        pairs = [(label, e) for label, e in pairs if e.hack_flags]
    text = render(pairs, limit=args.limit, chars=args.chars)
    from rich.console import Console

    Console(highlight=False, soft_wrap=True).print(text, markup=False)
    counts: dict[str, int] = {}
    for _, e in pairs:
        counts[e.status] = counts.get(e.status, 0) + 1
    flagged = sum(bool(e.hack_flags) for _, e in pairs)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"\n{len(pairs)} episodes: {summary}" + (f"; {flagged} flagged for reward hacking" if flagged else ""))
    return 0
