"""agentrl vs TRL's GRPOTrainer on the same single-turn job (JSON + a printed table).

Same model, same tasks in the same order, the same prompt tokens (rendered by agentrl's chat assembly;
TRL's own tokenization of them is checked token by token), the same reward (the env's sandboxed grader,
called exactly as agentrl's episode runner calls it), the same budget (steps x prompts x samples, new
tokens, temperature, learning rate, clip range). TRL runs its GSPO recipe exactly on-policy with
transformers ``generate``: ``importance_sampling_level="sequence"``, ``loss_type="grpo"``, epsilon
``algorithm.loss``'s ``eps_low`` / ``eps_high``, ``beta=0``, one optimizer step per generation batch. Each side
trains in its own subprocess (its peak RSS, taken when training ends, is its own) and then evaluates its final
model there; every model (base, agentrl's, TRL's) is evaluated by agentrl's paired held-out evaluator on a fresh
engine, with the same sampling seeds.

    pip install -e ".[compare]"     # trl==1.16.0
    python bench/studies/compare_trl.py --config configs/quickstart_single.yaml --out runs/compare_trl

Differences that remain (reported in the JSON): TRL pads each finished row of a batch with the pad token
(= EOS here), so a reply stopped by a stop string is trained with one EOS after it; TRL normalises
advantages with std + 1e-4 (agentrl: ``algorithm.adv_eps``); TRL's step includes no checkpoint write.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import SimpleQueue
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_runs import heldout_argv, heldout_job, peak_rss_gb, run_worker, train_argv

DEFAULT_CONFIG = "configs/quickstart_single.yaml"


def rendered_prompts(cfg: Any, tokenizer: Any, count: int) -> list[tuple[str, list[int]]]:
    """The first ``count`` tasks of agentrl's dataset order (``rollout.seed``) and their prompt ids, rendered
    exactly as an episode's first turn is (``env.reset`` -> chat template -> tokens)."""
    from agentrl.chat import ChatAssembler
    from agentrl.job.stack import env_factory_for
    from agentrl.rollout.dataset import TaskDataset, task_seed

    env = env_factory_for(cfg)()
    try:
        dataset = TaskDataset.from_env(env, seed=cfg.rollout.seed)
        assembler = ChatAssembler(tokenizer, tools=env.tool_schemas() or None)
        out = []
        for index in range(count):
            task_id = dataset.task_at(index)
            messages, _ = env.reset(seed=task_seed(task_id), options={"task_id": task_id})
            out.append((task_id, assembler.prompt_ids(list(messages))))
        return out
    finally:
        env.close()


class EnvReward:
    """TRL reward function: each completion graded by the run's env in one turn, as agentrl's runner does it
    (a trailing stop token dropped, the rest decoded verbatim; the env's outcome, else the turn's reward)."""

    __name__ = "env_reward"

    def __init__(self, cfg: Any, tokenizer: Any) -> None:
        from agentrl.chat import ChatAssembler
        from agentrl.job.stack import env_factory_for

        self.factory = env_factory_for(cfg)
        self.envs: SimpleQueue[Any] = SimpleQueue()
        self.opened: list[Any] = []
        probe = self._env()
        self.assembler = ChatAssembler(tokenizer, tools=probe.tool_schemas() or None)
        self.envs.put(probe)
        self.pool = ThreadPoolExecutor(cfg.rollout.concurrency)
        self.successes: list[float] = []

    def _env(self) -> Any:
        env = self.factory()
        self.opened.append(env)
        return env

    def grade(self, task_id: str, completion_ids: list[int]) -> tuple[float, bool]:
        """(final reward, success) of one single-turn episode."""
        from agentrl.env.contract import checked_step
        from agentrl.rollout.dataset import task_seed

        env = self.envs.get() if not self.envs.empty() else self._env()
        try:
            env.reset(seed=task_seed(task_id), options={"task_id": task_id})
            ids = list(completion_ids)
            if ids and ids[-1] in self.assembler.stop_token_ids:
                ids = ids[:-1]
            result = checked_step(env, env.step(self.assembler.decode(ids)))
        finally:
            self.envs.put(env)
        outcome = result.info.get("outcome")  # as the runner: the env's outcome when it gives one, else the reward
        reward = float(outcome if outcome is not None else result.reward)
        success = bool(result.info["success"]) if "success" in result.info else reward >= 1.0 - 1e-9
        return reward, success

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]], **kw: Any) -> list:
        graded = list(self.pool.map(self.grade, kw["task_id"], completion_ids))
        self.successes.append(sum(s for _, s in graded) / max(len(graded), 1))
        return [r for r, _ in graded]

    def close(self) -> None:
        """Close every env (and its sandbox)."""
        self.pool.shutdown()
        for env in self.opened:
            env.close()


def check_prompt_ids(trainer: Any, expected: dict[str, list[int]], seen: list[int]) -> None:
    """Wrap TRL's prompt tokenization: every prompt must tokenize to agentrl's ids, else the run stops."""
    original = getattr(trainer, "_tokenize_prompts", None)
    if original is None:
        raise RuntimeError("this TRL has no GRPOTrainer._tokenize_prompts to check prompt ids on; use trl==1.16.0")

    def checked(prompts: list[Any]) -> Any:
        out = original(prompts)
        for text, ids in zip(prompts, out[0]):
            if [int(t) for t in ids] != expected[text]:
                raise RuntimeError(f"TRL tokenized a prompt differently from agentrl: {text[:80]!r}")
        seen.append(len(prompts))
        return out

    trainer._tokenize_prompts = checked


def grpo_config(cfg: Any, out_dir: Path, grad_accum: int, checkpointing: bool, stop_ids: list[int]) -> Any:
    """TRL's GSPO recipe with the agentrl run's budget, exactly on-policy; rows stop where agentrl's do."""
    from trl import GRPOConfig

    rollout, loss, trainer = cfg.rollout, cfg.algorithm.loss, cfg.trainer
    batch = rollout.prompts_per_step * rollout.group_size
    if batch % grad_accum:
        raise SystemExit(f"--trl-grad-accum {grad_accum} must divide the {batch} completions of a step")
    generation: dict[str, Any] = {"eos_token_id": stop_ids}  # agentrl's engine stops at every end-of-turn id
    if rollout.stop:
        generation["stop_strings"] = list(rollout.stop)
    return GRPOConfig(
        output_dir=str(out_dir / "trainer"),
        max_steps=trainer.steps,
        per_device_train_batch_size=batch // grad_accum,
        gradient_accumulation_steps=grad_accum,  # = steps_per_generation: one optimizer step per generation
        num_iterations=1,
        num_generations=rollout.group_size,
        max_completion_length=rollout.max_new_tokens,
        temperature=rollout.temperature,
        top_p=1.0,
        top_k=0,
        generation_kwargs=generation,
        learning_rate=trainer.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=trainer.weight_decay,
        adam_beta1=trainer.betas[0],
        adam_beta2=trainer.betas[1],
        max_grad_norm=trainer.max_grad_norm,
        beta=0.0,
        epsilon=loss.eps_low,
        epsilon_high=loss.eps_high,
        importance_sampling_level="sequence",
        loss_type="grpo",
        scale_rewards="group",
        shuffle_dataset=False,  # the dataset is already in agentrl's task order
        gradient_checkpointing=checkpointing,
        use_cpu=cfg.model.device == "cpu",
        bf16=False,
        fp16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=trainer.seed,
    )


def trl_dataset(cfg: Any, tokenizer: Any) -> tuple[Any, dict[str, list[int]]]:
    """TRL's dataset (prompt text, task id) in agentrl's task order, and each prompt's agentrl token ids."""
    from datasets import Dataset

    prompts = rendered_prompts(cfg, tokenizer, cfg.trainer.steps * cfg.rollout.prompts_per_step)
    decode = functools.partial(tokenizer.decode, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    rows = [{"prompt": decode(ids), "task_id": task_id} for task_id, ids in prompts]
    return Dataset.from_list(rows), {row["prompt"]: ids for row, (_, ids) in zip(rows, prompts)}


def step_clock(clock: list[float]) -> Any:
    """A TrainerCallback that appends a timestamp when training begins and after every optimizer step."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            clock.append(time.perf_counter())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            clock.append(time.perf_counter())

    return StepClock()


def trl_job(config: str, overrides: list[str], out_dir: Path, grad_accum: int, checkpointing: bool) -> dict:
    """Train with TRL's GRPOTrainer, save the model, evaluate it; step times, rewards, peak RSS."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    from agentrl.job.loader import load_config
    from agentrl.job.stack import load_run_tokenizer

    started = time.perf_counter()  # like agentrl's side: loading, set-up and training
    cfg = load_config(config, overrides)
    tokenizer = load_run_tokenizer(cfg)
    tokenizer.pad_token = tokenizer.eos_token  # TRL cuts a row at its first EOS: padding must be one
    dataset, expected = trl_dataset(cfg, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32)
    # transformers' stop_strings need the tokenizer at generate(); TRL's call does not pass one.
    model.generate = functools.partial(model.generate, tokenizer=tokenizer)
    clock: list[float] = []
    reward = EnvReward(cfg, tokenizer)
    args = grpo_config(cfg, out_dir, grad_accum, checkpointing, list(reward.assembler.stop_token_ids))
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer,
        callbacks=[step_clock(clock)],
    )  # fmt: skip
    checked: list[int] = []
    check_prompt_ids(trainer, expected, checked)
    try:
        trainer.train()
    finally:
        reward.close()
    wall, peak = time.perf_counter() - started, peak_rss_gb()  # the peak before the evaluation's engine loads
    trainer.save_model(str(out_dir / "model"))
    tokenizer.save_pretrained(str(out_dir / "model"))
    logs = [h for h in trainer.state.log_history if "reward" in h]
    eos_ids = [int(i) for i in trainer.eos_token_ids]
    del trainer, model
    gc.collect()
    return {
        "side": "trl",
        "model_dir": str(out_dir / "model"),
        "step_s": [b - a for a, b in zip(clock, clock[1:])],
        "train_wall_s": wall,
        "reward_per_step": [h["reward"] for h in logs],
        "success_per_step": reward.successes,
        "mean_length_per_step": [h.get("completions/mean_length", 0.0) for h in logs],
        "prompt_ids_checked": sum(checked),
        "trl_eos_ids": eos_ids,
        "peak_rss_gb": peak,
        "after": asyncio.run(heldout_job(config, overrides, str(out_dir / "model"), "after-trl", out_dir)),
    }


def _single_turn_config(config: str, overrides: list[str]) -> Any:
    """The validated run config; SystemExit unless its episodes are single-turn (TRL's GRPO is)."""
    from agentrl.job.loader import load_config
    from agentrl.job.stack import env_factory_for

    cfg = load_config(config, overrides)
    env = env_factory_for(cfg)()
    try:
        turns = cfg.rollout.max_turns or getattr(env, "max_turns", None)
    finally:
        env.close()
    if turns != 1:
        raise SystemExit(
            f"{config}: episodes have up to {turns} turns; this comparison is single-turn (set rollout.max_turns=1 or "
            "use configs/quickstart_single.yaml)"
        )
    if cfg.algorithm.loss.kind not in ("gspo", "gspo_token"):  # TRL's side is GSPO with the loss's clip range
        raise SystemExit(f"{config}: algorithm.loss is {cfg.algorithm.loss.kind!r}; set algorithm.loss=gspo_token")
    return cfg


def side_summary(train: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """One column of the table: times, memory, learning."""
    steps = train["step_s"]
    if "trained" in train:  # agentrl: every trained episode's sampled tokens
        lengths = [row["tokens"] for row in train["trained"]]
        mean_length = sum(lengths) / max(len(lengths), 1)
    else:
        mean_length = statistics.fmean(train["mean_length_per_step"]) if train["mean_length_per_step"] else 0.0
    return {
        "step_s_median": statistics.median(steps) if steps else 0.0,
        "steps_total_s": sum(steps),
        "train_wall_s": train["train_wall_s"],
        "peak_rss_gb": train["peak_rss_gb"],
        "reward_per_step": train["reward_per_step"],
        "mean_trained_tokens": mean_length,
        "heldout_pass@1": {
            split: {"before": before["splits"][split]["pass@1"], "after": after["splits"][split]["pass@1"]}
            for split in before["splits"]
        },
    }


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The markdown table docs/results/single-turn.md quotes."""
    sides = list(summary)
    rows = [
        ("step time, median (s)", lambda s: f"{s['step_s_median']:.1f}"),
        ("all steps (s)", lambda s: f"{s['steps_total_s']:.0f}"),
        ("job: loading + set-up + steps (s)", lambda s: f"{s['train_wall_s']:.0f}"),
        ("peak RSS of the training process (GB)", lambda s: f"{s['peak_rss_gb']:.1f}"),
        (
            "training reward, first -> last step",
            lambda s: f"{s['reward_per_step'][0]:.2f} -> {s['reward_per_step'][-1]:.2f}",
        ),
        ("mean trained completion (tokens)", lambda s: f"{s['mean_trained_tokens']:.0f}"),
    ]
    for split in summary[sides[0]]["heldout_pass@1"]:
        rows.append(
            (
                f"held-out {split} pass@1, before -> after",
                lambda s, k=split: f"{s['heldout_pass@1'][k]['before']:.2f} -> {s['heldout_pass@1'][k]['after']:.2f}",
            )
        )
    lines = ["| | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(summary[side]) for side in sides) + " |" for name, cell in rows]
    return "\n".join(lines)


def trl_argv(config: str, overrides: list[str], out_dir: Path, grad_accum: int, checkpointing: bool) -> list[str]:
    """Arguments of ``run_worker`` for TRL's training job."""
    argv = [__file__, "--worker", "trl", "--config", config, "--out", str(out_dir), "--trl-grad-accum", str(grad_accum)]
    argv += ["--trl-gradient-checkpointing", "on" if checkpointing else "off"]
    return argv + [arg for item in overrides for arg in ("-o", item)]


def compare(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """Evaluate the base model, then train and evaluate each side in turn; the report."""
    cfg = _single_turn_config(args.config, overrides)
    out: Path = args.out
    grad_accum = args.trl_grad_accum or cfg.rollout.prompts_per_step
    checkpointing = args.trl_gradient_checkpointing == "on"
    evals = out / "eval"
    before = run_worker(
        heldout_argv(args.config, overrides, cfg.model.path, "before", evals), out / "logs/eval-before.log"
    )
    sides: dict[str, Any] = {}
    for side in args.sides.split(","):
        print(f"[compare] training {side} ...", flush=True)
        if side == "agentrl":
            argv = train_argv(args.config, overrides, out / "agentrl", then_heldout=True)
        elif side == "trl":
            argv = trl_argv(args.config, overrides, out / "trl", grad_accum, checkpointing)
        else:
            raise SystemExit(f"--sides: unknown side {side!r}; use agentrl and/or trl")
        train = run_worker(argv, out / f"logs/{side}.log")  # trains, then evaluates the final model
        sides[side] = {"train": train, "after": train.pop("after")}
    summary = {side: side_summary(r["train"], before, r["after"]) for side, r in sides.items()}
    return {
        "config": args.config,
        "overrides": overrides,
        "trl": {"grad_accum": grad_accum, "gradient_checkpointing": checkpointing, "recipe": "GSPO, exactly on-policy"},
        "summary": summary,
        "table": table(summary),
        "before": before,
        "runs": sides,
    }


def main() -> None:
    """Compare (default), or run TRL's side as a worker (``--worker trl``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--config", default=DEFAULT_CONFIG, help=f"A single-turn run config (default {DEFAULT_CONFIG})."
    )
    parser.add_argument("-o", "--override", action="append", default=[], help="Dotted override for both sides.")
    parser.add_argument("--steps", type=int, default=None, help="Training steps of each side (default: the config's).")
    parser.add_argument("--out", type=Path, default=None, help="Output directory (default runs/compare_trl-<time>).")
    parser.add_argument("--sides", default="agentrl,trl", help="Which sides to run, in order.")
    parser.add_argument("--trl-grad-accum", type=int, default=None, help="TRL micro-steps per step (default B).")
    parser.add_argument("--trl-gradient-checkpointing", choices=["on", "off"], default="on", help="TRL's default: on.")
    parser.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    overrides = list(args.override) + ([f"trainer.steps={args.steps}"] if args.steps else [])
    if args.worker == "trl":
        result = trl_job(args.config, overrides, args.out, args.trl_grad_accum, args.trl_gradient_checkpointing == "on")
        args.result.write_text(json.dumps(result))
        return
    args.out = args.out or Path(f"runs/compare_trl-{time.strftime('%Y%m%d-%H%M%S')}")
    report = compare(args, overrides)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_trl.json").write_text(json.dumps(report, indent=1))
    print(report["table"])
    print(f"[compare] report: {args.out / 'compare_trl.json'}")


if __name__ == "__main__":
    main()
