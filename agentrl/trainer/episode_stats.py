"""Per-step episode metrics of a rollout batch: reward, success, lengths, turns, finish reasons."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from agentrl.evaluation.behaviour import behaviour_metrics
from agentrl.trajectory import Episode


def episode_metrics(groups: Sequence[Sequence[Episode]]) -> dict[str, float]:
    """Means over the batch's episodes, named ``episode/<metric>``; canaries (``info["canary"]``) are left out of
    them and measured on their own (``integrity/*``), and so are episodes the env could not score
    (``infra_failure``: no verdict, so neither a success nor a failure, nor a hack suspect; counted as
    ``rollout/infra_failures``)."""
    canaries = [e for g in groups for e in g if e.canary]
    integrity = integrity_metrics(canaries)
    scored = [[e for e in g if e.infra_failure is None] for g in groups if not any(e.canary for e in g)]
    return {**_real_metrics([g for g in scored if g]), **integrity}


def integrity_metrics(canaries: Sequence[Episode]) -> dict[str, float]:
    """``integrity/canary_pass_rate``: the share of the step's canaries that passed (no honest answer can, so any
    pass is a forged reward); ``integrity/canaries``: how many there were. Empty without canaries."""
    if not canaries:
        return {}
    passed = sum(e.canary_passed for e in canaries)
    return {"integrity/canary_pass_rate": passed / len(canaries), "integrity/canaries": float(len(canaries))}


def _real_metrics(groups: Sequence[Sequence[Episode]]) -> dict[str, float]:
    episodes = [e for g in groups for e in g]
    if not episodes:
        return {}
    rewards = [e.final_reward for e in episodes if e.final_reward is not None]
    completion = [sum(len(s.completion_ids) for s in e.segments) for e in episodes]
    sampled = [sum(s.num_sampled for s in e.segments) for e in episodes]
    out = {
        "episode/reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "episode/reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
        "episode/success_rate": sum(e.success for e in episodes) / len(episodes),
        "episode/turns_mean": statistics.fmean(len(e.turns) for e in episodes),
        "episode/completion_tokens_mean": statistics.fmean(completion),
        "episode/sampled_tokens_mean": statistics.fmean(sampled),
        "episode/truncated_frac": sum(e.status == "truncated" for e in episodes) / len(episodes),
        "episode/resumed_frac": sum(e.resumed > 0 for e in episodes) / len(episodes),
        "episode/groups_all_equal": float(sum(len({e.final_reward for e in g}) <= 1 for g in groups)),
        # Episodes an env flagged for attempted reward hacking (info["hack_flags"]): watch it climb.
        "reward/hack_suspect_frac": sum(bool(e.hack_flags) for e in episodes) / len(episodes),
    }
    out.update(
        {f"episode/{name}": value for name, value in behaviour_metrics(episodes).items() if name != "turns_mean"}
    )
    for name, values in _components(episodes).items():
        out[f"episode/reward_{name}"] = statistics.fmean(values)
    return out


def _components(episodes: Sequence[Episode]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for episode in episodes:
        for name, value in episode.reward_components.items():
            found.setdefault(name, []).append(float(value))
    return found
