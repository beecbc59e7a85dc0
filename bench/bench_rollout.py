"""Rollout benchmark (JSON on stdout): partial rollouts vs synchronous collection, and orchestrator overhead.

1. Heavy-tailed reply lengths (lognormal per task, a few replies ~8x the median): mean wall time to
   collect B complete groups per step, with partial rollouts vs synchronous collection (target <= 0.6x).
2. Overhead: episodes of a trivial multi-turn env through the orchestrator vs the same generate calls
   (same inputs, same output lengths, same concurrency) sent to the engine alone (target >= 0.9x).

Uses the tiny random model and the real embedded engine: ``python bench/bench_rollout.py [--model DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.env import MultiTurnEnv, StepResult, user
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trajectory import Episode


class LengthEnv(MultiTurnEnv):
    """A trivial env whose tasks fix each reply's length via info['max_new_tokens']: lognormal around
    ``median`` plus a ``tail`` fraction at ``cap_ratio`` x the median (drawn per task id)."""

    def __init__(
        self,
        num_tasks: int = 512,
        turns: int = 1,
        median: int = 24,
        sigma: float = 0.9,
        cap_ratio: float = 8.0,
        tail: float = 0.08,
    ) -> None:
        self.turns, self.num_tasks, self.tail = turns, num_tasks, tail
        self.median, self.sigma, self.cap = median, sigma, int(median * cap_ratio)
        self.max_turns = turns
        self.length = median
        self.count = 0

    def task_ids(self) -> list[str]:
        return [f"t{i}" for i in range(self.num_tasks)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        super().reset(seed=seed)
        rng = random.Random((options or {}).get("task_id", "t0"))
        drawn = self.median * math.exp(rng.gauss(0.0, self.sigma)) if self.sigma else self.median
        if self.sigma and rng.random() < self.tail:
            drawn = self.cap  # the heavy tail: a few replies 8x the median
        self.length = max(2, min(self.cap, int(drawn)))
        self.count = 0
        return [user("Count.")], {"max_new_tokens": self.length}

    def step(self, action: str) -> StepResult:
        self.count += 1
        return [user("more")], 1.0, self.count >= self.turns, False, {"max_new_tokens": self.length}


async def _collect(
    engine: EmbeddedEngine, tokenizer: Any, cfg: RolloutConfig, env_kwargs: dict[str, Any], steps: int
) -> tuple[list[float], list[Episode], float]:
    """Per-step wall times, the trained episodes, and all tokens generated (in-flight ones too)."""
    env = lambda: LengthEnv(**env_kwargs)  # noqa: E731
    orch = RolloutOrchestrator(
        engine, env, tokenizer, cfg, dataset=TaskDataset.from_env(env(), seed=cfg.seed), buffer=None
    )
    times, episodes, generated = [], [], 0.0
    for step in range(1, steps + 1):
        started = time.perf_counter()
        batch = await orch.collect_step(step)
        times.append(time.perf_counter() - started)
        episodes += [e for g in batch.groups for e in g]
        generated += batch.metrics["rollout/tokens_generated"]
    await orch.close()
    return times, episodes, generated


def mode_summary(times: list[float], lengths: list[int], counters: dict[str, float]) -> dict[str, Any]:
    """One mode's step times, trained-length distribution and token counters, as the report shows them."""
    done, c = sorted(lengths), counters
    trained = sum(done)
    return {
        "step_s": [round(t, 3) for t in times],
        "mean_step_s": sum(times) / len(times),
        "groups_trained": c["groups"],
        "trained_tokens": trained,
        "trained_tokens_per_s": trained / sum(times),
        "generated_tokens": c["generated"],
        "stale_discarded_tokens": c["discarded"],
        "stale_discarded_frac_of_generated": c["discarded"] / max(c["generated"], 1.0),
        "trained_median_tokens": done[len(done) // 2],
        "trained_mean_tokens": trained / len(done),
        "trained_max_tokens": done[-1],
    }


async def partial_vs_sync(
    engine: EmbeddedEngine, tokenizer: Any, steps: int, median: int, over_sample: float, max_staleness: int
) -> dict[str, Any]:
    """Partial rollouts (the main job's over-sampling) vs synchronous collection, for equal trained work.

    Both modes train the same B groups of G episodes per step for the same number of steps, drawing the
    same task sequence (same dataset seed). After every step the engine takes a weight update (the same
    weights, a new version: the prefix cache is flushed and carried partials age), so the staleness bound
    throws work away as it would in training; those tokens are counted. Modes alternate step by step on one
    engine, so a shared machine's load drift hits both alike; the update follows each pair of steps, so
    both modes sample step k from version k - 1.
    """
    env_kwargs = {"median": median, "sigma": 0.8, "cap_ratio": 8.0, "tail": 0.08}  # 8% of replies at 8x
    base = {
        "group_size": 4,
        "prompts_per_step": 4,
        "max_new_tokens": median * 8,
        "max_episode_tokens": median * 8 + 64,
        "concurrency": 8,
        "max_staleness": max_staleness,
    }
    env = lambda: LengthEnv(**env_kwargs)  # noqa: E731
    modes = {"sync": {"partial_rollout": False}, "partial": {"partial_rollout": True, "over_sample": over_sample}}
    orchs = {
        m: RolloutOrchestrator(
            engine, env, tokenizer, RolloutConfig(**base, **x), dataset=TaskDataset.from_env(env()), buffer=None
        )
        for m, x in modes.items()
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    lengths: dict[str, list[int]] = {m: [] for m in modes}
    counters = {m: dict.fromkeys(("generated", "discarded", "groups"), 0.0) for m in modes}
    weights = {k: v.detach().clone() for k, v in engine.runner.model.state_dict().items()}
    for step in range(1, steps + 1):
        for mode, orch in orchs.items():
            started = time.perf_counter()
            batch = await orch.collect_step(step)
            times[mode].append(time.perf_counter() - started)
            lengths[mode] += [e.segment.num_sampled for g in batch.groups for e in g]
            counters[mode]["generated"] += batch.metrics["rollout/tokens_generated"]
            counters[mode]["discarded"] += batch.metrics["rollout/stale_discarded_tokens"]
            counters[mode]["groups"] += len(batch.groups)
        await engine.update_weights(weights, version=step)
    out: dict[str, Any] = {"steps": steps, "over_sample": over_sample, "max_staleness": max_staleness}
    for mode, orch in orchs.items():
        await orch.close()
        out[mode] = mode_summary(times[mode], lengths[mode], counters[mode])
    if out["partial"]["groups_trained"] != out["sync"]["groups_trained"]:
        raise RuntimeError(
            f"unequal work: {out['partial']['groups_trained']} vs {out['sync']['groups_trained']} groups"
        )
    out["ratio_partial_over_sync"] = out["partial"]["mean_step_s"] / out["sync"]["mean_step_s"]
    out["target"] = "<= 0.6"
    return out


async def _engine_alone(engine: EmbeddedEngine, episodes: list[Episode]) -> float:
    """Replay every turn's generate call (same input, same output length), episodes concurrent."""

    async def one(ep: Episode) -> int:
        seg, done = ep.segment, 0
        starts = [
            i for i, (t, m) in enumerate(zip(seg.turn_ids, seg.loss_mask)) if m and (i == 0 or seg.turn_ids[i - 1] != t)
        ]
        for start in starts:
            n = next((j for j in range(start, len(seg.loss_mask)) if not seg.loss_mask[j]), len(seg.loss_mask)) - start
            params = SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True)
            result = await engine.generate(seg.prompt_ids + seg.completion_ids[:start], params)
            done += len(result.output_ids)
        return done

    started = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(e) for e in episodes)))
    return tokens / (time.perf_counter() - started)


async def overhead(engine: EmbeddedEngine, tokenizer: Any, median: int, repeats: int = 5) -> dict[str, Any]:
    """Orchestrator tokens/s on a trivial 3-turn env vs the engine alone on the same calls.

    Runs alternate ``repeats`` times; the median of the per-pair ratios is the result: on a shared
    machine other processes' load, not the code under test, dominates single-run noise.
    """
    cfg = RolloutConfig(
        group_size=4,
        prompts_per_step=8,
        partial_rollout=False,
        max_new_tokens=median,
        max_episode_tokens=1024,
        concurrency=8,
    )
    env_kwargs = {"median": median, "sigma": 0.0, "turns": 3}
    await _collect(engine, tokenizer, cfg, env_kwargs, 1)  # warm-up
    orch_runs, engine_runs, tokens = [], [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        _, episodes, _ = await _collect(engine, tokenizer, cfg, env_kwargs, 1)
        tokens = sum(e.segment.num_sampled for e in episodes)
        orch_runs.append(tokens / (time.perf_counter() - started))
        engine_runs.append(await _engine_alone(engine, episodes))
    ratios = sorted(o / e for o, e in zip(orch_runs, engine_runs))
    return {
        "episodes": len(episodes),
        "tokens_per_run": tokens,
        "orchestrator_tok_s": [round(x, 1) for x in orch_runs],
        "engine_alone_tok_s": [round(x, 1) for x in engine_runs],
        "ratio_median": ratios[len(ratios) // 2],
        "ratio_of_best": max(orch_runs) / max(engine_runs),
        "target": ">= 0.9",
    }


async def profile_orchestrator(engine: EmbeddedEngine, tokenizer: Any, median: int, top: int) -> dict[str, Any]:
    """Where the event-loop thread's time goes in one orchestrator run of the overhead workload.

    cProfile sees the asyncio thread only (the engine's model runs on its own thread), so the table says
    how much of the wall time the orchestrator's own Python costs, and in which functions.
    """
    import cProfile
    import pstats

    cfg = RolloutConfig(
        group_size=4,
        prompts_per_step=8,
        partial_rollout=False,
        max_new_tokens=median,
        max_episode_tokens=1024,
        concurrency=8,
    )
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    await _collect(engine, tokenizer, cfg, {"median": median, "sigma": 0.0, "turns": 3}, 1)
    profiler.disable()
    wall = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {"function": f"{Path(file).name}:{line}:{name}", "calls": calls, "self_s": tottime, "cum_s": cumtime}
        )
    rows.sort(key=lambda r: -r["self_s"])
    ours = sum(r["self_s"] for r in rows if "agentrl" in r["function"] or r["function"].split(":")[0] in _OURS)
    busy = sum(r["self_s"] for r in rows if "select" not in r["function"] and "poll" not in r["function"])
    return {"wall_s": wall, "loop_busy_s": busy, "agentrl_self_s": ours, "top_self": rows[:top]}


_OURS = {"orchestrator.py", "runner.py", "ledger.py", "chat.py", "groups.py", "metrics.py", "engine.py"}


def suppress_end_of_turn(engine: EmbeddedEngine) -> None:
    """Give the random model's lm_head a -1e4 bias on end-of-turn/EOS ids, so reply lengths are exactly
    the drawn ones (a random model otherwise stops at <|im_end|> by chance and cuts the heavy tail)."""
    import torch

    model = engine.runner.model
    head = model.get_output_embeddings()
    biased = torch.nn.Linear(
        head.in_features, head.out_features, bias=True, dtype=head.weight.dtype, device=head.weight.device
    )
    biased.weight = head.weight  # shared: weight updates and tying keep working
    with torch.no_grad():
        biased.bias.zero_()
        for token in ("<|im_end|>", "<|endoftext|>"):
            biased.bias[engine.tokenizer.convert_tokens_to_ids(token)] = -1e4
    model.set_output_embeddings(biased)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None, help="Model directory (default: build the tiny model in a temp dir).")
    parser.add_argument("--steps", type=int, default=6, help="Steps per mode (>= 5).")
    parser.add_argument("--median", type=int, default=24, help="Median reply length in tokens.")
    parser.add_argument("--over-sample", type=float, default=1.5, help="Partial mode's over-sampling (main job: 1.5).")
    parser.add_argument("--max-staleness", type=int, default=2, help="Staleness bound (main job: 2).")
    parser.add_argument("--profile", type=int, default=0, help="Also profile one orchestrator run: top N functions.")
    args = parser.parse_args()
    model_dir = Path(args.model) if args.model else None
    if model_dir is None:
        from agentrl.models.tiny import make_tiny_model

        model_dir = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    engine = EmbeddedEngine.from_pretrained(model_dir, config=EmbeddedEngineConfig(max_seq_len=2048, max_batch_size=64))
    suppress_end_of_turn(engine)
    result = {
        "model": str(model_dir),
        "partial_vs_sync": await partial_vs_sync(
            engine, engine.tokenizer, args.steps, args.median, args.over_sample, args.max_staleness
        ),
        "overhead": await overhead(engine, engine.tokenizer, args.median),
    }
    if args.profile:
        result["overhead_profile"] = await profile_orchestrator(engine, engine.tokenizer, args.median, args.profile)
    await engine.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
