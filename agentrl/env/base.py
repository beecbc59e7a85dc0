"""The multi-turn environment contract: a real ``gymnasium.Env`` whose actions and observations are text.

``reset`` returns the opening chat messages; ``step(action_text)`` returns the messages the
environment adds, the turn's reward, and the usual terminated/truncated/info. Environments that
are deterministic given (seed, options, actions) can be restored mid-episode by replay.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, ClassVar, SupportsFloat, TypedDict

import gymnasium as gym
from pydantic import BaseModel

from agentrl.chat.messages import Message, assistant, system, tool, user
from agentrl.env.spaces import MessageList, UnicodeText
from agentrl.errors import ConfigError, RolloutError, did_you_mean
from agentrl.tools import as_tool

__all__ = [
    "EnvInfo",
    "Message",
    "MultiTurnEnv",
    "StepResult",
    "assistant",
    "restore_env",
    "system",
    "tool",
    "user",
]

StepResult = tuple[list[Message], SupportsFloat, bool, bool, dict[str, Any]]

HACK_FLAGS = "hack_flags"
# info key: why the env could not score this step for a reason outside the policy (the grading infrastructure
# failed, after the env's own retry). The episode is then no sample of the policy: it is kept in the archive,
# counted (rollout/infra_failures) and left out of the loss, its group's advantages computed over the rest.
INFRA_FAILURE = "infra_failure"
"""Info key of ``step`` (``list[str]``): signals of attempted reward hacking seen in this turn, each
``"<kind>: <detail>"`` (e.g. ``"introspection: sys._getframe"``). The rollout records them on the turn and
the episode (``Episode.hack_flags``), counts ``reward/hack_suspect_frac`` and ``agentrl inspect`` shows
them; the env decides whether a flag also costs reward. Any env that grades untrusted output may set it."""


CANARY = "canary"
"""Info key of ``reset`` (or ``step``), ``bool``: this episode is a *canary*, a task no honest answer can pass
(e.g. hidden tests that contradict each other), which the env mixes into its tasks to measure reward hacking
while training. Indistinguishable to the policy by design. The rollout marks the episode (``Episode.canary``);
the trainer leaves it out of the loss and out of the reward metrics, logs ``integrity/canary_pass_rate`` (the
share of the step's canaries that passed: a success, or a final reward above 0), adds a ``canary_passed`` flag to
any that passed (``agentrl inspect --flagged`` lists it) and warns loudly the first time."""


def hack_flags(info: dict[str, Any]) -> list[str]:
    """The hack flags of a step's ``info`` (``[]`` when absent); a malformed value is an env bug, named here."""
    flags = info.get(HACK_FLAGS, [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        raise RolloutError(
            f"info[{HACK_FLAGS!r}] must be a list of 'kind: detail' strings, got {flags!r:.200}; fix the env's step()"
        )
    return flags


class EnvInfo(TypedDict, total=False):
    """Every key of ``reset``/``step`` info that agentrl reads; all are optional, other keys are only recorded.

    The info dict of each step is stored on the turn record (``agentrl inspect`` shows it) after a
    JSON round trip; ``agentrl.env.contract`` checks the types of these keys where info enters the
    rollout, and ``docs/writing-an-environment.md`` lists them.
    """

    success: bool
    """Step that ends the episode: the task was solved. Drives pass@k (``agentrl eval``, held-out eval) and
    ``episode/success_rate``; absent, an episode succeeds when its final reward is at least 1."""
    reward_components: dict[str, float]
    """Step: named parts of the reward, logged as ``episode/reward_<name>``; the latest step's dict is the
    episode's."""
    outcome: float
    """Step that ends the episode: the episode's outcome R_i, separate from the turn rewards (which then are
    per-turn signals); absent, R_i is the sum of the turn rewards. See "Rewards" in the env tutorial."""
    max_new_tokens: int
    """Reset or step: most tokens of the next assistant reply (never more than ``rollout.max_new_tokens``)."""
    sandbox_time_s: float
    """Step: seconds this turn spent in a sandbox, summed into ``rollout/sandbox_time_s``."""
    action: str
    """Step of a tool/code env: what the turn did, ``"run"`` (code executed, not graded as the answer),
    ``"submit"`` (graded), ``"none"`` or ``"invalid"``; read by the behaviour metrics
    (``agentrl.evaluation.behaviour``)."""
    run_failed: bool
    """Step with ``action`` ``"run"``: the code raised, timed out or failed a check it was run against; the
    behaviour metrics count a later solve as a recovery."""
    code_ran: bool
    """Step: code was executed and ran; ``False`` counts as a failed run when ``run_failed`` is absent."""
    tool_calls: int
    """Step of a tool env: tool calls the turn made; with ``tool_errors`` it gives the behaviour metric
    ``valid_tool_call_frac``."""
    tool_errors: int
    """Step of a tool env: how many of the turn's ``tool_calls`` were malformed or failed."""
    canary: bool
    """Reset or step: the episode is a canary, a task no honest answer passes (see ``CANARY``)."""
    hack_flags: list[str]
    """Step: signals of attempted reward hacking seen in this turn, each ``"<kind>: <detail>"``; recorded on
    the episode (``Episode.hack_flags``), counted as ``reward/hack_suspect_frac``, shown by ``agentrl inspect``
    (see ``HACK_FLAGS``)."""


class MultiTurnEnv(gym.Env[list[Message], str]):
    """Base class of agentrl environments (subclass it; override ``reset`` and ``step``).

    * action: the assistant's text for one turn (``str``, any Unicode);
    * observation: the list of new chat messages (``{"role", "content"}`` dicts) the env adds;
    * info (of ``reset`` and ``step``): a JSON-able dict; the keys agentrl reads are those of ``EnvInfo``,
      the rest is recorded on the turn for inspection;
    * ``reset(seed=..., options={"task_id": ...})`` starts the task ``task_id`` when the env has
      a task set (``task_ids()``); call ``super().reset(seed=seed)`` first to seed ``np_random``;
    * rewards: ``step`` returns the reward r_k of that turn. The episode's outcome R is
      ``info["outcome"]`` when the env sets it on the step that ends the episode: a reward of its
      own (e.g. the final verdict), *not* the sum of the turn rewards and never added to them, so
      per-turn schemes see the turn rewards as shaping and R as the result. Without it, R is the
      return, the sum of the turn rewards (each counted once). See docs/writing-an-environment.md;
    * ``max_turns``: the rollout stops the episode (truncated) after this many assistant turns;
    * ``cutoff_outcome``: R of an episode that ends without ``info["outcome"]`` (the rollout's token budget or
      ``rollout.max_turns`` ended it first). None keeps the return; an env whose turn rewards are signals
      beside a separate outcome sets its failing outcome (e.g. 0.0), so running out of budget after some
      paid turns never scores better than a wrong answer;
    * ``tools``: plain typed Python functions the model may call (see ``agentrl.tools``);
    * ``config_model``: optional pydantic model of the constructor kwargs, checked before a run starts;
    * ``replayable``: True when (seed, options, recorded actions) reproduce the env state, which
      is how partial episodes are restored in a later job unless ``snapshot``/``restore`` exist.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    max_turns: ClassVar[int] = 8
    replayable: ClassVar[bool] = True
    cutoff_outcome: ClassVar[float | None] = None
    tools: ClassVar[tuple[Any, ...]] = ()
    config_model: ClassVar[type[BaseModel] | None] = None

    action_space = UnicodeText()
    observation_space = MessageList()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Seed ``np_random``; subclasses call this first, then return the opening messages and info."""
        super().reset(seed=seed)
        return [], {}

    def step(self, action: str) -> StepResult:
        """Apply the assistant's text; returns (new messages, reward, terminated, truncated, info)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(action: str)")

    def choose_task_id(self, options: dict[str, Any] | None, known: Collection[str], where: str) -> str:
        """The task ``reset`` starts: ``options['task_id']``, else one of ``known`` drawn with ``np_random``.

        Call it after ``super().reset(seed=seed)``, so a seed picks the same task every time; ``where`` names
        the task set in the ``ConfigError`` an unknown id raises (with the closest known id).
        """
        task_id = (options or {}).get("task_id")
        if task_id is None:
            if not known:
                raise ConfigError(f"{where} has no tasks to draw from: check the env's task configuration")
            return list(known)[int(self.np_random.integers(len(known)))]
        if task_id not in known:
            raise ConfigError(f"task {task_id!r} is not in {where}.{did_you_mean(str(task_id), known)}")
        return str(task_id)

    def task_ids(self) -> list[str]:
        """Ids of this env's tasks for the configured split; [] when tasks are seeds only."""
        return []

    def tool_schemas(self) -> list[dict[str, Any]]:
        """JSON schemas (OpenAI/Qwen function format) of ``tools``, for the chat template."""
        return [as_tool(fn).schema for fn in self.tools]

    def preflight(self) -> list[str]:
        """Check the external resources this env needs (sandboxes, services) without running an episode.

        Returns one line per thing checked (``agentrl train --dry-run`` prints them); raises an
        ``AgentRLError`` (or the resource's own error) that names the fix when something is unusable.
        """
        return []

    def snapshot(self) -> Any:
        """A JSON-able snapshot of the env state, or None to rely on deterministic replay."""
        return None

    def restore(self, snapshot: Any) -> None:
        """Restore a state produced by ``snapshot`` (only called when ``snapshot`` returned non-None)."""
        raise NotImplementedError(f"{type(self).__name__} returned a snapshot but does not implement restore()")


def restore_env(
    env: MultiTurnEnv,
    *,
    seed: int | None,
    options: dict[str, Any] | None,
    actions: Sequence[str] = (),
    snapshot: Any = None,
) -> list[Message]:
    """Bring ``env`` to the state after ``actions``: ``restore(snapshot)`` if given, else replay.

    Returns the messages the replay produced (opening messages then each step's messages), so a
    caller can check them against the recorded chat. Raises ``RolloutError`` when the env can do
    neither (``replayable = False`` and no snapshot) or the replay ends early; the rollout then
    restarts the episode from scratch (``agentrl.rollout.replay``).
    """
    base = env.unwrapped
    messages, _ = env.reset(seed=seed, options=options)
    if snapshot is not None:
        base.restore(snapshot)  # type: ignore[attr-defined]
        return list(messages)
    if actions and not getattr(base, "replayable", False):
        raise RolloutError(
            f"environment {type(base).__name__} has replayable=False and no snapshot, so it cannot be "
            f"restored after {len(actions)} turn(s); implement snapshot()/restore() or restart the episode"
        )
    history = list(messages)
    for index, action in enumerate(actions):
        new_messages, _, terminated, truncated, _ = env.step(action)
        history.extend(new_messages)
        if (terminated or truncated) and index < len(actions) - 1:
            raise RolloutError(
                f"replaying {type(base).__name__} ended after {index + 1} of {len(actions)} recorded turns: "
                "the env is not deterministic given (seed, options, actions); set replayable = False or add "
                "snapshot()/restore()"
            )
    return history
