"""The rollout section of a run's config: how episodes are collected, partial rollouts, dynamic sampling."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentrl.config.base import StrictModel

TaskOrder = Literal["shuffle", "stratified"]  # how each epoch orders the task ids (rollout.dataset)


class RolloutConfig(StrictModel):
    """How episodes are collected each step, including partial rollouts."""

    group_size: int = Field(4, ge=1, description="Episodes per task (G): one GRPO/GSPO group.")
    prompts_per_step: int = Field(8, ge=1, description="Complete groups (B) a training step needs.")
    partial_rollout: bool = Field(
        True,
        description="Keep extra episodes in flight; abort the rest once B groups are complete and resume them next "
        "step.",
    )
    over_sample: float = Field(
        1.5, ge=1.0, description="With partial rollouts: groups kept in flight = ceil(over_sample * prompts_per_step)."
    )
    batch_order: Literal["finish", "start"] = Field(
        "finish",
        description="With partial rollouts, which complete groups a step trains: finish = the first B to complete "
        "(fastest; groups with long replies wait, age and may be restarted, which favours short answers); start = the "
        "B oldest in the order they were started (length-unbiased: the step waits for its oldest groups while the "
        "extra ones keep generating for the next step).",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO-style dynamic sampling: a complete group whose every turn gets zero advantage under "
        "algorithm.turn_advantage (all its episodes scored alike: no gradient) is filtered out (kept in the "
        "trajectory archive, not trained) and a fresh group is admitted in its place, so a step trains on B groups "
        "that carry signal. At most rollout.max_filtered_groups per step; past it groups train as they come.",
    )
    max_filtered_groups: int = Field(
        16,
        ge=0,
        description="dynamic_sampling: most groups one step may filter out. Bounds the extra generation a step can "
        "spend when most tasks are all-solved or all-failed.",
    )
    max_staleness: int = Field(
        2, ge=0, description="Most policy versions between a partial episode's oldest token and the current policy."
    )
    staleness_policy: Literal["drop", "mask"] = Field(
        "drop",
        description="Too-stale partial episodes: drop and restart them, or keep them and let the trainer mask stale "
        "tokens.",
    )
    max_turns: int | None = Field(None, ge=1, description="Turn limit per episode (default: the env's max_turns).")
    max_new_tokens: int = Field(256, ge=1, description="Most tokens sampled in one assistant turn.")
    max_episode_tokens: int = Field(
        2048,
        ge=16,
        description="Token budget of a whole episode (prompt + completion); past it the episode is truncated.",
    )
    temperature: float = Field(
        1.0, gt=0.0, description="Sampling temperature (the trainer uses the same T for its logprobs)."
    )
    stop: list[str] = Field(
        default_factory=list,
        description="Extra stop strings for every turn (e.g. '```\\n' to end at a closed code block).",
    )
    on_failure: Literal["drop", "fail"] = Field(
        "drop",
        description="An env/sandbox/engine error in an episode: drop that episode's group from the step (recorded), or "
        "fail the step.",
    )
    max_drop_rate: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="on_failure=drop: most fraction of a step's groups that may be dropped (dropped / (dropped + "
        "trained)); past it the run stops with the last errors, as soon as that is certain. 1 never stops.",
    )
    engine_retries: int = Field(
        3,
        ge=0,
        description="With on_failure: drop, groups a step may drop for an engine error while the engine stays "
        "healthy (each one is replaced by a fresh group); one more ends the step with an error naming the failure.",
    )
    template_mismatch: Literal["error", "new_segment"] = Field(
        "error",
        description="A chat template that cannot extend the history as an exact prefix: fail, or start a new token "
        "segment.",
    )
    concurrency: int = Field(64, ge=1, description="Most episodes stepping their env at once (thread pool size).")
    seed: int = Field(0, description="Seed of the dataset order and episode seeds (default: the run's seed).")
    task_order: TaskOrder = Field(
        "shuffle",
        description="Each epoch's order of the task ids (every task once per epoch either way): shuffle = a seeded "
        "permutation; stratified = seeded permutations of each stratum (a task id's part before its last '/', e.g. "
        "a family) interleaved in proportion to their sizes, so a step's tasks mix the strata as the whole set "
        "does and its success rate moves with the policy, not with which strata the step drew.",
    )
