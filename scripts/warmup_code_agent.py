"""Supervised fail-then-fix warm-up for CodeAgent-v0: scripted chats from the env itself, then ``agentrl.trainer.sft``.

Each chat is a training-split task played in a real sandbox: a plausible wrong draft of the task's family,
the env's real feedback on it (the failing visible example), then the reference solution, which the env
grades as a success (``envs/code_agent/traces.py``). Held-out kinds and instances are never used. The warmed
model is written as a model directory a run config can point ``model.path`` at.

    python scripts/warmup_code_agent.py --model models/smollm2-135m-instruct --out models/smollm2-code-agent --tasks 60

``scripts/quickstart.sh`` runs exactly that once (the main job's model, ``configs/quickstart.yaml``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction; give a value from 0 to 1, e.g. 0.5")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The warm-up's command line."""
    from agentrl.trainer.sft import add_sft_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    parser.add_argument("--out", type=Path, required=True, help="Where the warmed model directory goes.")
    parser.add_argument("--tasks", type=int, default=60, help="Training-split tasks to script (at most).")
    add_sft_arguments(parser)
    parser.add_argument(
        "--untrained-drafts", action="store_true", help="Keep the wrong drafts as context only (train the fixes)."
    )
    parser.add_argument(
        "--repeat-frac",
        type=_fraction,
        default=0.0,
        help="Fraction of chats that repeat the wrong draft before the fix (0-1).",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "configs" / "quickstart.yaml",
        help="Run config whose env.kwargs.tasks (the generator: families, held-out and validation shares) defines "
        "the training split the chats come from, so the warm-up never sees the job's held-out or validation tasks.",
    )
    parser.add_argument("--sandbox", default="auto", help="Sandbox kind the chats are played in (auto/docker/process).")
    return parser.parse_args(argv)


def generator_of(config_path: Path) -> dict:
    """The task generator settings (``env.kwargs.tasks``) of a run config; {} (the defaults) when it sets none."""
    import yaml

    with open(config_path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    return ((config.get("env") or {}).get("kwargs") or {}).get("tasks") or {}


def scripted_chats(
    task_count: int,
    seed: int,
    sandbox: str,
    *,
    train_drafts: bool = True,
    repeat_frac: float = 0.0,
    tasks: dict | None = None,
) -> tuple[list[list[dict]], int, list[dict]]:
    """Fail-then-fix chats of up to ``task_count`` training tasks (seeded choice), how many tasks were tried, and
    the env's tool schemas (the rollout renders them into the prompt, so the warm-up does too). A seeded
    ``repeat_frac`` of the chats repeat their wrong draft once before the fix (``fail_then_fix(repeat=True)``)."""
    from envs.code_agent.env import CodeAgentEnv
    from envs.code_agent.traces import fail_then_fix

    env = CodeAgentEnv(split="train", tasks=tasks or {}, sandbox={"kind": sandbox}, canary_share=0.0)  # no canary chats
    try:
        task_ids = env.task_ids()
        random.Random(seed).shuffle(task_ids)
        chosen = task_ids[:task_count]
        rng = random.Random(f"{seed}/repeat")
        traces = (
            fail_then_fix(env, task_id, train_draft=train_drafts, repeat=rng.random() < repeat_frac)
            for task_id in chosen
        )
        chats = [chat for chat in traces if chat is not None]
        schemas = env.tool_schemas()
    finally:
        env.close()
    return chats, len(chosen), schemas


def main(argv: list[str] | None = None) -> dict:
    """Script the chats, train, save the model and ``warmup.json`` beside it; returns the report."""
    args = parse_args(argv)
    import torch

    from agentrl.chat import ChatAssembler
    from agentrl.models.loading import load_model, load_tokenizer
    from agentrl.trainer.sft import SftConfig, progress_line, publish_model, run_sft

    torch.manual_seed(args.seed)
    chats, tried, schemas = scripted_chats(
        args.tasks,
        args.seed,
        args.sandbox,
        train_drafts=not args.untrained_drafts,
        repeat_frac=args.repeat_frac,
        tasks=generator_of(args.config),
    )
    print(f"[warmup] {len(chats)} fail-then-fix chats from {tried} training tasks", flush=True)
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
    result = {
        "base_model": str(args.model),
        "tasks_tried": tried,
        "config": str(args.config),
        "untrained_drafts": args.untrained_drafts,
        "repeat_frac": args.repeat_frac,
        **cfg.model_dump(),
        **report.model_dump(),
    }
    publish_model(args.out, lm, tokenizer, result)
    first, last = report.loss_per_step[0], report.loss_per_step[-1]
    print(
        f"[warmup] {report.steps} steps over {report.trained_tokens} trained tokens ({report.total_tokens} in all): "
        f"token NLL {first:.3f} -> {last:.3f} in {report.seconds:.0f} s; model in {args.out}",
        flush=True,
    )
    return result


if __name__ == "__main__":
    main()
