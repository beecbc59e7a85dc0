"""The episode record: every token a rollout produced, with the engine's logprobs and versions.

Invariant (per ``TokenSegment``): ``completion_ids``, ``logprobs``, ``loss_mask``, ``turn_ids`` and
``versions`` have equal length; tokens with ``loss_mask == 1`` were sampled by the engine and their
logprob is the engine's, verbatim; env/template tokens have logprob 0, turn id -1, version -1.
History is never re-tokenized: a segment only grows by appending.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

EpisodeStatus = Literal["running", "partial", "complete", "truncated", "failed"]


class TokenSegment(BaseModel):
    """One token sequence the trainer sees as a row: a prompt plus interleaved completion tokens.

    An episode has one segment unless its chat template cannot extend the history as an exact
    prefix and the ledger was configured to start a new segment instead of failing.
    """

    model_config = ConfigDict(extra="forbid")

    prompt_ids: list[int] = Field(default_factory=list, description="Tokens of the opening messages (not trained).")
    completion_ids: list[int] = Field(
        default_factory=list, description="Assistant and env tokens after the prompt, in order."
    )
    logprobs: list[float] = Field(
        default_factory=list, description="Engine logprob per completion token (0 for env tokens)."
    )
    loss_mask: list[int] = Field(default_factory=list, description="1 on tokens the policy sampled, else 0.")
    turn_ids: list[int] = Field(
        default_factory=list, description="Assistant turn index per token, -1 on env/template tokens."
    )
    versions: list[int] = Field(
        default_factory=list, description="Policy version that sampled each token, -1 on env tokens."
    )

    @model_validator(mode="after")
    def _aligned(self) -> TokenSegment:
        n = len(self.completion_ids)
        lengths = {len(self.logprobs), len(self.loss_mask), len(self.turn_ids), len(self.versions)}
        if lengths != {n}:
            raise ValueError(
                f"token segment arrays are misaligned: completion_ids has {n} tokens but "
                f"logprobs/loss_mask/turn_ids/versions have {len(self.logprobs)}/{len(self.loss_mask)}/"
                f"{len(self.turn_ids)}/{len(self.versions)}; append tokens only through the TokenLedger"
            )
        return self

    @property
    def input_ids(self) -> list[int]:
        """The whole sequence the engine saw: prompt followed by the completion."""
        return self.prompt_ids + self.completion_ids

    @property
    def num_sampled(self) -> int:
        """Number of policy-sampled (trained) tokens."""
        return sum(self.loss_mask)


class TurnRecord(BaseModel):
    """One assistant turn and the environment's answer to it."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Assistant turn index k (0-based).")
    action: str = Field("", description="The assistant's decoded text for this turn (what env.step received).")
    finish_reason: str | None = Field(
        None, description="Engine finish reason of the turn's last generation: stop, length or abort."
    )
    reward: float | None = Field(
        None, description="Per-turn reward from env.step (None: not stepped yet or no reward)."
    )
    num_tokens: int = Field(0, description="Tokens the policy sampled in this turn.")
    env_messages: list[dict[str, Any]] = Field(
        default_factory=list, description="Messages the env added after this turn."
    )
    max_new_tokens: int | None = Field(
        None,
        description="The env's cap on this turn's reply (info max_new_tokens of reset or of the previous step); "
        "None: rollout.max_new_tokens alone.",
    )
    info: dict[str, Any] = Field(
        default_factory=dict, description="JSON-able info returned by env.step, exactly as the env returned it."
    )


class Episode(BaseModel):
    """A multi-turn episode: identity, tokens (segments), turns, rewards and status."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str = Field(description="Unique id of this episode.")
    task_id: str = Field(description="Id of the dataset task (prompt) this episode answers.")
    group_id: str = Field(description="Episodes sharing a group id form one GRPO/GSPO group.")
    env_id: str = Field("", description="Registry id or module:Class of the environment.")
    seed: int | None = Field(None, description="Seed passed to env.reset (needed for replay).")
    reset_options: dict[str, Any] = Field(
        default_factory=dict, description="Options passed to env.reset (needed for replay)."
    )
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The chat so far, for inspection (never re-tokenized)."
    )
    segments: list[TokenSegment] = Field(
        default_factory=lambda: [TokenSegment()], description="Token rows; usually exactly one."
    )
    turns: list[TurnRecord] = Field(default_factory=list, description="Assistant turns in order.")
    status: EpisodeStatus = Field(
        "running", description="running, partial (aborted mid-way, resumable), complete, truncated, failed."
    )
    final_reward: float | None = Field(
        None,
        description="The episode's outcome R_i: the env's info['outcome'] when it set one, else the sum of the "
        "per-turn rewards (the return).",
    )
    outcome: float | None = Field(
        None,
        description="The env's own outcome (info['outcome'] on the final step), separate from the turn rewards; "
        "None when the env set none (then final_reward is the sum of the turn rewards).",
    )
    reward_components: dict[str, float] = Field(
        default_factory=dict, description="Named reward parts from env info, for logging."
    )
    hack_flags: list[str] = Field(
        default_factory=list,
        description="Signals of attempted reward hacking the env reported (info['hack_flags']), over all turns.",
    )
    canary: bool = Field(
        False,
        description="A canary task (info['canary']): no honest answer passes it; never trained on, its passes are "
        "counted as integrity/canary_pass_rate and flagged.",
    )
    env_snapshot: Any = Field(
        None, description="JSON-able env.snapshot() at the last turn boundary, when the env supports it."
    )
    error: str | None = Field(None, description="Error text when status is failed.")
    infra_failure: str | None = Field(
        None,
        description="Why the env could not score the episode for a reason outside the policy (info['infra_failure']: "
        "a lost judge, a sandbox or daemon that failed); such an episode is kept but left out of the loss.",
    )
    resumed: int = Field(0, description="How many times this episode was resumed from a partial state.")
    created_version: int = Field(0, description="Policy version when the episode started.")

    @property
    def segment(self) -> TokenSegment:
        """The segment new tokens are appended to."""
        return self.segments[-1]

    @property
    def min_version(self) -> int | None:
        """Oldest policy version among sampled tokens (None when nothing was sampled)."""
        versions = [v for s in self.segments for v, m in zip(s.versions, s.loss_mask) if m]
        return min(versions) if versions else None

    @property
    def canary_passed(self) -> bool:
        """A canary that passed (success, or a final reward above 0): its verdict was forged, never earned."""
        return self.canary and (self.success or (self.final_reward or 0.0) > 0.0)

    @property
    def success(self) -> bool:
        """Solved: the ``success`` the env reported at its last step, else a final reward of at least 1.

        The one definition ``agentrl eval`` (pass@k) and the training metric ``episode/success_rate`` share;
        a failed episode never succeeds.
        """
        if self.status == "failed":
            return False
        if self.turns and "success" in self.turns[-1].info:
            return bool(self.turns[-1].info["success"])
        return (self.final_reward or 0.0) >= 1.0 - 1e-9

    @property
    def turn_rewards(self) -> list[float | None]:
        """Per-turn rewards in order (None for turns without a reward)."""
        return [t.reward for t in self.turns]
