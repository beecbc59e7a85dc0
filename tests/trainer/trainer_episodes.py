"""Hand-built episodes for trainer tests; their "engine" logprobs are the model's own (exactly on-policy)."""

from __future__ import annotations

import random

import torch

from agentrl.trajectory import Episode, TokenSegment, TurnRecord


def model_logprobs(lm: torch.nn.Module, ids: list[int], temperature: float = 1.0) -> list[float]:
    """log_softmax(logits / T) of ids[1:] under ``lm``: what an exact engine would report."""
    from agentrl.trainer.logprobs import naive_token_logprobs

    with torch.no_grad():
        return naive_token_logprobs(lm, torch.tensor([ids]), temperature)[0].tolist()


def make_episode(
    lm: torch.nn.Module,
    *,
    group: int,
    index: int,
    reward: float,
    turns: int = 2,
    seed: int = 0,
    version: int = 0,
    temperature: float = 1.0,
) -> Episode:
    """A multi-turn episode: prompt, then per turn sampled tokens (mask 1) and env tokens (mask 0)."""
    rng = random.Random(seed * 1000 + group * 10 + index)
    prompt = [rng.randrange(3, 2000) for _ in range(rng.randint(3, 6))]
    completion: list[int] = []
    mask: list[int] = []
    turn_ids: list[int] = []
    for k in range(turns):
        n_sampled = rng.randint(1, 5)
        completion += [rng.randrange(3, 2000) for _ in range(n_sampled)]
        mask += [1] * n_sampled
        turn_ids += [k] * n_sampled
        if k < turns - 1:
            n_env = rng.randint(1, 3)
            completion += [rng.randrange(3, 2000) for _ in range(n_env)]
            mask += [0] * n_env
            turn_ids += [-1] * n_env
    all_lp = model_logprobs(lm, prompt + completion, temperature)[len(prompt) - 1 :]
    logprobs = [lp if m else 0.0 for lp, m in zip(all_lp, mask)]
    versions = [version if m else -1 for m in mask]
    segment = TokenSegment(
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=logprobs,
        loss_mask=mask,
        turn_ids=turn_ids,
        versions=versions,
    )
    return Episode(
        episode_id=f"e{group}-{index}",
        task_id=f"t{group}",
        group_id=f"g{group}",
        segments=[segment],
        turns=[TurnRecord(index=k, reward=None) for k in range(turns)],
        status="complete",
        final_reward=reward,
    )


def make_groups(lm: torch.nn.Module, rewards: list[list[float]], **kwargs: object) -> list[list[Episode]]:
    """Groups of episodes with the given outcome rewards."""
    return [
        [make_episode(lm, group=g, index=i, reward=r, **kwargs) for i, r in enumerate(rs)]  # type: ignore[arg-type]
        for g, rs in enumerate(rewards)
    ]
