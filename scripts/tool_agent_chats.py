"""Write scripted ToolUse-v0 chats for a supervised warm-up: ``scripts/warmup_sft.py --chats`` reads the file.

Each chat is one training-split question of a run config's ToolUse-v0 task set, played through the env
(``envs/tool_use/demos.py``): look the facts up, compute, answer. A share of the chats (``--slip-share``) first
mistypes a call, reads the tool's error and fixes it. Validation and held-out questions are never used. Prints
the ``--env-kwargs`` JSON to give ``warmup_sft.py``, so the warm-up renders the same tool schemas as training.

    python scripts/tool_agent_chats.py --config configs/tool_agent.yaml --chats 48 --out chats.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tool_agent.yaml")
    parser.add_argument("--out", type=Path, required=True, help="The JSONL file of chats.")
    parser.add_argument("--chats", type=int, default=48, help="Training questions to script (at most).")
    parser.add_argument("--slip-share", type=float, default=0.25, help="Share of chats that fix a mistyped call.")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def env_kwargs_of(config_path: Path) -> dict[str, Any]:
    """The run config's ToolUse-v0 kwargs, on the train split; SystemExit when the config trains another env."""
    import yaml

    with open(config_path, encoding="utf-8") as handle:
        env = (yaml.safe_load(handle) or {}).get("env") or {}
    if env.get("id") != "agentrl/ToolUse-v0":
        raise SystemExit(f"{config_path}: env.id is {env.get('id')!r}; these chats are for agentrl/ToolUse-v0")
    return {**(env.get("kwargs") or {}), "split": "train"}


def stratified(task_ids: list[str], count: int, rng: random.Random) -> list[str]:
    """``count`` ids drawn kind by kind in turn, so every training kind is demonstrated about equally."""
    by_kind: dict[str, list[str]] = {}
    for task_id in task_ids:
        by_kind.setdefault(task_id.split("/", 1)[0], []).append(task_id)
    for ids in by_kind.values():
        rng.shuffle(ids)
    chosen: list[str] = []
    while len(chosen) < min(count, len(task_ids)):
        for ids in by_kind.values():
            if ids and len(chosen) < count:
                chosen.append(ids.pop())
    return chosen


def main(argv: list[str] | None = None) -> list[list[dict[str, Any]]]:
    """Write the chats; returns them."""
    from envs.tool_use.demos import demonstration
    from envs.tool_use.env import ToolUseEnv

    args = parse_args(argv)
    kwargs = env_kwargs_of(args.config)
    env = ToolUseEnv(**{**kwargs, "max_turns": max(kwargs.get("max_turns", 4), 4)})
    rng = random.Random(args.seed)
    chosen = stratified(env.task_ids(), args.chats, rng)
    slips = set(rng.sample(range(len(chosen)), round(args.slip_share * len(chosen))))
    chats = [demonstration(env, task_id, slip=i in slips, seed=args.seed) for i, task_id in enumerate(chosen)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps({"messages": chat}) + "\n" for chat in chats), encoding="utf-8")
    told = f"{len(chats)} chats ({len(slips)} fix a mistyped call) of {len(env.task_ids())} training questions"
    print(f"[chats] {told} -> {args.out}")
    print(json.dumps({k: v for k, v in kwargs.items() if k != "split"}))
    return chats


if __name__ == "__main__":
    main()
