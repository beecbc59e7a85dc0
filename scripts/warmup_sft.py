"""Supervised warm-up for any environment: chats from a JSONL file, trained with ``agentrl.trainer.sft``.

A base model that never makes a valid tool call in your env gives RL no signal (every group's rewards
are equal). A few supervised passes over chats that use the env's protocol correctly teach the format
first (docs/writing-an-environment.md, "Your first run"). Each line of CHATS.jsonl is one chat:

* ``{"messages": [...]}``: opening messages (system/user), then assistant turns with the env's replies
  between them, written by hand or by a script that plays your env; or
* an episode as ``agentrl rollout --out`` or a run's ``trajectories/`` write it (its ``messages``); with
  ``--min-reward R`` only episodes whose ``final_reward`` is at least R are kept (the successes of a
  stronger model, or of a sampled rollout).

``--env ID`` (a registry id or ``module:Class``, with ``--env-kwargs JSON``) renders the env's tool
schemas into the prompt exactly as training will, so the warmed model sees the same system prompt.

    python scripts/warmup_sft.py --model models/smollm2-135m-instruct --chats chats.jsonl \\
        --env my_envs:Adventure --out models/smollm2-adventure
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# `python scripts/warmup_sft.py --env my_envs:Adventure` puts scripts/ first on the path, not the directory it runs
# in: add that one too, as the agentrl command does, so the env module beside the user is found
if str(Path.cwd()) not in sys.path:
    sys.path.append(str(Path.cwd()))


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every option's default after its help."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The warm-up's command line."""
    from agentrl.trainer.sft import add_sft_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="The base model directory.")
    parser.add_argument("--chats", type=Path, required=True, help="JSONL: one chat or episode per line.")
    parser.add_argument("--out", type=Path, required=True, help="Where the warmed model directory goes.")
    parser.add_argument("--env", help="Env id or module:Class whose tool schemas go into the prompt.")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of the env's kwargs (with --env).")
    parser.add_argument("--min-reward", type=float, help="Keep only episodes with final_reward >= this.")
    parser.add_argument(
        "--skip-if-current",
        action="store_true",
        help="Do nothing when --out already holds a warm-up of the same recipe (base model, chats, env, settings).",
    )
    add_sft_arguments(parser)
    return parser.parse_args(argv)


def read_chats(path: Path, min_reward: float | None) -> list[list[dict[str, Any]]]:
    """The chats of ``path`` (see the module docstring); SystemExit naming the line of a malformed one."""
    from agentrl.util.jsonl import jsonl_lines

    chats = []
    for number, line in jsonl_lines(path.read_text(encoding="utf-8")):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{number}: not JSON ({exc}); write one chat object per line") from None
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list) or not messages:
            raise SystemExit(f'{path}:{number}: no "messages" list; write {{"messages": [{{"role": ..., ...}}]}}')
        reward = record.get("final_reward")
        if min_reward is not None and (reward is None or reward < min_reward):
            continue
        chats.append(messages)
    return chats


def tool_schemas(env_ref: str | None, kwargs_json: str) -> list[dict[str, Any]]:
    """The env's tool schemas as a run renders them ([] without ``--env``)."""
    if env_ref is None:
        return []
    from agentrl.env.registry import make_env

    env = make_env(env_ref, **json.loads(kwargs_json))
    try:
        return env.tool_schemas()
    finally:
        env.close()


def recipe_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the warmed model is a function of: a finished warm-up of an equal recipe need not run again."""
    return {
        "base_model": str(args.model.resolve()),
        "chats_sha256": hashlib.sha256(args.chats.read_bytes()).hexdigest(),
        "env": args.env,
        "env_kwargs": json.loads(args.env_kwargs),
        "min_reward": args.min_reward,
        "epochs": args.epochs,
        "lr": args.lr,
        "batch_tokens": args.batch_tokens,
        "seed": args.seed,
    }


def is_current(out: Path, recipe: dict[str, Any]) -> bool:
    """Whether ``out`` holds a finished warm-up (its ``warmup.json``) of ``recipe``."""
    try:
        return json.loads((out / "warmup.json").read_text(encoding="utf-8")).get("recipe") == recipe
    except (OSError, json.JSONDecodeError):
        return False


def main(argv: list[str] | None = None) -> dict:
    """Read the chats, train, save the model and ``warmup.json`` beside it; returns the report."""
    args = parse_args(argv)
    recipe = recipe_of(args)
    if args.skip_if_current and is_current(args.out, recipe):
        print(f"[warmup] {args.out} is a finished warm-up of the same chats and settings; not run again", flush=True)
        return {"recipe": recipe, "skipped": True}
    import torch

    from agentrl.chat import ChatAssembler
    from agentrl.models.loading import load_model, load_tokenizer
    from agentrl.trainer.sft import SftConfig, progress_line, publish_model, run_sft

    torch.manual_seed(args.seed)
    chats = read_chats(args.chats, args.min_reward)
    schemas = tool_schemas(args.env, args.env_kwargs)
    print(f"[warmup] {len(chats)} chats from {args.chats}; {len(schemas)} tool schemas in the prompt", flush=True)
    tokenizer = load_tokenizer(args.model)
    lm = load_model(args.model, dtype=torch.float32)
    cfg = SftConfig(
        epochs=args.epochs,
        lr=args.lr,
        batch_tokens=args.batch_tokens,
        micro_batch_tokens=args.micro_batch_tokens or None,
        seed=args.seed,
    )
    began = time.perf_counter()

    def progress(step: int, total: int, loss: float) -> None:
        print(f"[warmup] {progress_line(step, total, loss, time.perf_counter() - began)}", flush=True)

    report = run_sft(lm, ChatAssembler(tokenizer, tools=schemas or None), chats, cfg, on_step=progress)
    result = {"base_model": str(args.model), "chats_file": str(args.chats), "env": args.env, "recipe": recipe}
    result |= {**cfg.model_dump(), **report.model_dump()}
    publish_model(args.out, lm, tokenizer, result)
    first, last = report.loss_per_step[0], report.loss_per_step[-1]
    print(
        f"[warmup] {report.steps} steps over {report.trained_tokens} trained tokens: token NLL {first:.3f} -> "
        f"{last:.3f} in {report.seconds:.0f} s; model in {args.out} (point model.path at it)",
        flush=True,
    )
    return result


if __name__ == "__main__":
    from agentrl.errors import AgentRLError

    try:
        main()
    except AgentRLError as exc:  # a wrong --env or --env-kwargs: one line naming the fix, not a traceback
        raise SystemExit(f"warmup_sft.py: error: {exc}") from None
