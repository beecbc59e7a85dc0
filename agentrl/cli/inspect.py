"""``agentrl inspect RUN_DIR_OR_FILE [--step N]``: print episodes turn by turn.

Reads a run directory's rollout buffer (``rollout_buffer.sqlite``), the buffer file itself, or a
JSONL file of episodes (``agentrl rollout --out``). Shows the prompt each episode started from (decoded
from its tokens: system and tools prompt as the model saw them, when a tokenizer is at hand), then per
turn the model's text, the env's reply, reward, token count, the policy versions, partial/resumed/errors,
and the reward-hack flags an env raised (``--flagged`` keeps only flagged episodes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLError, ConfigError
from agentrl.trajectory import Episode, TurnRecord
from agentrl.util.jsonl import jsonl_lines


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
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="Model directory whose tokenizer decodes the prompts (default: the model of the run directory).",
    )
    parser.add_argument(
        "--prompt-chars", type=int, default=3000, help="Most characters of each decoded prompt to print."
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
        episodes = [Episode.model_validate_json(line) for _, line in jsonl_lines(path.read_text(encoding="utf-8"))]
        return [("file", e) for e in episodes]
    buffer = RolloutBuffer(path)
    try:
        groups = buffer.load_groups(("inflight", "ready", "handed", "trained", "dropped", "filtered"))
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


def run_model_path(source: str | Path) -> str | None:
    """The model a run directory (or the directory of a buffer/JSONL file) was made with, if it says so."""
    directory = Path(source) if Path(source).is_dir() else Path(source).parent
    # run.json: agentrl.trainer.validate.write_run_meta; rollout_config.json: agentrl rollout
    for name, keys in (("run.json", ("model_path",)), ("rollout_config.json", ("model", "path"))):
        try:
            value: Any = json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            return value
    return None


def _prompt_lines(e: Episode, tokenizer: Any, chars: int, prompt_chars: int) -> list[str]:
    """The decoded prompt (system and tools prompt included) when a tokenizer is given, else the opening messages."""
    ids = e.segments[0].prompt_ids if e.segments else []
    if tokenizer is not None and ids:
        text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        lines = [f"  prompt ({len(ids)} tokens, as the model saw it):"]
        return lines + [f"    {line}" for line in _clip(text, prompt_chars).splitlines()]
    end = next((i for i, m in enumerate(e.messages) if m.get("role") == "assistant"), len(e.messages))
    return [f"  {m.get('role', '?')}: {_clip(str(m.get('content', '')), chars)!r}" for m in e.messages[:end]]


def render(
    pairs: list[tuple[str, Episode]],
    *,
    limit: int = 20,
    chars: int = 400,
    tokenizer: Any = None,
    prompt_chars: int = 3000,
) -> str:
    """The readable text of up to ``limit`` episodes (prompts decoded with ``tokenizer`` when given)."""
    blocks = []
    for label, e in pairs[:limit]:
        lines = [_header(label, e), *_prompt_lines(e, tokenizer, chars, prompt_chars)]
        for turn in e.turns:
            lines.extend(_turn_lines(e, turn, chars))
        if e.error:
            lines.append(f"  ERROR: {e.error}")
        blocks.append("\n".join(lines))
    if len(pairs) > limit:
        blocks.append(f"... {len(pairs) - limit} more episodes (raise --limit)")
    return "\n\n".join(blocks) if blocks else "no episodes"


def _tokenizer(args: argparse.Namespace) -> tuple[Any, str]:
    """The tokenizer that decodes prompts, and a note when there is none."""
    from agentrl.models.loading import load_tokenizer

    path = args.tokenizer or run_model_path(args.source)
    if path is None:
        return None, "(opening messages shown; pass --tokenizer MODEL_DIR to see the system/tools prompt as rendered)"
    try:
        return load_tokenizer(path, require_chat_template=False), ""
    except AgentRLError as exc:
        if args.tokenizer:
            raise
        return None, f"(opening messages shown: the run's tokenizer did not load: {exc})"


def run_command(args: argparse.Namespace) -> int:
    """Print the episodes (rich console when available)."""
    pairs = load_episodes(args.source, step=args.step, state=args.state)
    if args.flagged:
        pairs = [(label, e) for label, e in pairs if e.hack_flags]
    tokenizer, note = _tokenizer(args)
    text = render(pairs, limit=args.limit, chars=args.chars, tokenizer=tokenizer, prompt_chars=args.prompt_chars)
    if note:
        text = f"{note}\n\n{text}"
    from rich.console import Console

    Console(highlight=False, soft_wrap=True).print(text, markup=False)
    counts: dict[str, int] = {}
    for _, e in pairs:
        counts[e.status] = counts.get(e.status, 0) + 1
    flagged = sum(bool(e.hack_flags) for _, e in pairs)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"\n{len(pairs)} episodes: {summary}" + (f"; {flagged} flagged for reward hacking" if flagged else ""))
    return 0
