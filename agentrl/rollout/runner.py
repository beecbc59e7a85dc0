"""One episode's loop: generate, append the sampled tokens verbatim, step the env, render its reply.

Invariant: every sampled token enters the episode through ``TokenLedger.append_sampled`` with the
engine's logprob and version; a stop request (the step boundary) leaves the episode ``partial``
with everything generated so far, and ``run`` continues it later from ``ledger.input_ids()``.
What the env returns is checked where it enters (``agentrl.env.contract``); the info keys read
here are those of ``agentrl.env.EnvInfo``. A request the engine aborts on its own (not at a step
boundary) is retried; retries that bring no token back wait with backoff and are bounded
(``MAX_IDLE_ABORTS``), then the episode fails.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from agentrl.chat import ChatAssembler
from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import InferenceEngine, SamplingParams, new_request_id
from agentrl.env import INFRA_FAILURE, MultiTurnEnv, hack_flags
from agentrl.env.contract import checked_reset, checked_step
from agentrl.errors import EngineError, EnvContractError
from agentrl.rollout.canary import check_canary, note_canary
from agentrl.rollout.env_threads import SLOW_ENV_NOTICE_S, EnvTimeoutError, wait_env_call
from agentrl.rollout.metrics import RolloutMetrics, SentTokens
from agentrl.rollout.replay import as_recorded
from agentrl.rollout.stop_strings import cut_at_straddling_stop
from agentrl.rollout.tracebacks import TracebackLog
from agentrl.trajectory import Episode, TurnRecord
from agentrl.trajectory.ledger import TokenLedger

FINISHED = ("complete", "truncated", "failed")
MAX_IDLE_ABORTS = 8  # engine-side aborts in a row that returned no token before the episode fails
ABORT_BACKOFF_S = 0.05  # the first wait after such an abort; doubles each time, at most 2 s


@dataclass
class RunContext:
    """What every runner of an orchestrator shares: engine, config, template, thread pool, metrics."""

    engine: InferenceEngine
    config: RolloutConfig
    assembler: ChatAssembler
    executor: Executor
    metrics: RolloutMetrics
    step_timeout_s: float | None = None  # env.step_timeout_s: an env call running longer fails its episode
    notice_s: float = SLOW_ENV_NOTICE_S  # say so while an env call runs this long
    tracebacks: TracebackLog | None = None  # where an env's traceback is kept (the run directory)


class EpisodeRunner:
    """Drives one episode against an engine and an env; ``run`` is resumable after a stop."""

    def __init__(self, episode: Episode, env: MultiTurnEnv | None, ctx: RunContext) -> None:
        self.episode = episode
        self.env = env
        self.ctx = ctx
        self.ledger = TokenLedger(episode, ctx.assembler)
        self.stop_requested = False
        self.request_id: str | None = None
        self.idle_aborts = 0  # engine-side aborts in a row that returned no token
        self.failure_source: str | None = None  # "env", "engine" or "ledger" when the episode failed
        self.env_method = ""  # the env method called last: a failure names it
        self.env_abandoned = False  # an env call timed out: its thread may still run, so the env is never reused
        # The env's cap on the next reply (info max_new_tokens of reset or the last step); the open turn's
        # record keeps it in its own field, so a reply resumed in another job keeps its budget.
        self.turn_cap: int | None = None
        stepped = [t for t in episode.turns if t.reward is not None]
        if stepped:
            self._take_cap(stepped[-1].info)
        self.task: asyncio.Task[Episode] | None = None
        self.sent = SentTokens()  # what this runner sent the engine's current weights (prefill accounting)

    @property
    def finished(self) -> bool:
        """True once the episode is complete, truncated or failed."""
        return self.episode.status in FINISHED

    @property
    def max_turns(self) -> int:
        """The turn limit: the rollout config's, else the env's own."""
        env_limit = getattr(self.env, "max_turns", 8)
        return self.ctx.config.max_turns or env_limit

    async def run(self) -> Episode:
        """Run until the episode ends or ``stop_requested`` is set (then it is ``partial``)."""
        if self.episode.status == "partial":
            self.episode.status = "running"
        self.idle_aborts = 0
        try:
            if not self.ledger.segment.prompt_ids:
                await self._start()
            while not self.finished:
                if self.stop_requested:
                    self.episode.status = "partial"
                    break
                await self._turn()
        except Exception as exc:  # an env, engine or template failure is data: recorded on the episode
            self._fail(exc)
        return self.episode

    def _fail(self, exc: Exception) -> None:
        source = self.failure_source or "env"
        self.failure_source = source
        self.episode.status = "failed"
        where = ""
        if source == "env" and self.env_method and not isinstance(exc, (EnvContractError, EnvTimeoutError)):
            where = f"{type(self.env).__name__}.{self.env_method} raised "  # those two name the method themselves
        self.episode.error = f"{source}: {where}{type(exc).__name__}: {exc}"
        if source == "env" and self.ctx.tracebacks is not None and not isinstance(exc, EnvTimeoutError):
            saved = self.ctx.tracebacks.keep(exc, self.episode)
            self.episode.error += f" (traceback: {saved})"
        self.ctx.metrics.failed += 1

    async def _call_env(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call env.<name>: its async variant ``a<name>`` when present, else in the thread pool."""
        self.failure_source, self.env_method = "env", name
        started = time.perf_counter()
        what = (
            f"{type(self.env).__name__}.{name} (episode {self.episode.episode_id[:8]}, task {self.episode.task_id!r})"
        )
        try:
            async_fn = getattr(self.env, f"a{name}", None)
            if async_fn is not None and inspect.iscoroutinefunction(async_fn):
                call = async_fn(*args, **kwargs)
            else:
                call = asyncio.get_running_loop().run_in_executor(
                    self.ctx.executor, functools.partial(getattr(self.env, name), *args, **kwargs)
                )
            return await wait_env_call(call, what, timeout_s=self.ctx.step_timeout_s, notice_s=self.ctx.notice_s)
        except EnvTimeoutError:
            self.env_abandoned = True
            abandon = getattr(self.ctx.executor, "abandon", None)
            if abandon is not None:  # the stuck worker no longer counts against the pool's size
                abandon()
            raise
        finally:
            self.ctx.metrics.env_time_s += time.perf_counter() - started

    async def _start(self) -> None:
        observation, info = checked_reset(
            self.env, await self._call_env("reset", seed=self.episode.seed, options=dict(self.episode.reset_options))
        )
        self._take_cap(info)
        note_canary(self.episode, info)
        self.failure_source = "ledger"
        self.ledger.start(list(observation))
        self.episode.status = "running"

    def _take_cap(self, info: dict[str, Any]) -> None:
        cap = info.get("max_new_tokens")
        self.turn_cap = int(cap) if cap is not None else None

    def _turn_record(self) -> TurnRecord:
        """The open turn's record (created when the turn starts)."""
        turns = self.episode.turns
        if not turns or turns[-1].reward is not None:
            turns.append(TurnRecord(index=len(turns), max_new_tokens=self.turn_cap))
        return turns[-1]

    async def _turn(self) -> None:
        """Generate (the rest of) one assistant turn, then step the env unless stopped."""
        turn = self._turn_record()
        input_ids = self.ledger.input_ids()
        context_left = self.ctx.config.max_episode_tokens - len(input_ids)
        cap = turn.max_new_tokens or self.ctx.config.max_new_tokens
        turn_left = min(self.ctx.config.max_new_tokens, int(cap)) - turn.num_tokens
        if context_left <= 0 and turn.num_tokens == 0:
            self.episode.turns.pop()
            self._finish("truncated")
            return
        max_new = min(turn_left, context_left)
        if max_new > 0:
            before = turn.num_tokens
            finish, message = await self._generate(turn, input_ids, max_new)
            if finish == "abort":
                await self._after_abort(turn.num_tokens - before, message)
                return  # stopped (partial), or aborted by the engine (a weight update, an operator): retried
            self.idle_aborts = 0
        elif turn.finish_reason in (None, "abort"):
            turn.finish_reason = "length"
        await self._step(turn)

    async def _after_abort(self, produced: int, message: object) -> None:
        """Bound engine-side aborts: back off while they bring no token, fail the episode past the bound."""
        if self.stop_requested:
            return  # the step boundary asked for it
        self.idle_aborts = 0 if produced else self.idle_aborts + 1
        if self.idle_aborts > MAX_IDLE_ABORTS:
            self.failure_source = "engine"
            raise EngineError(
                f"the engine aborted this episode's request {self.idle_aborts} times in a row without a token or a "
                f"step boundary (last: {message!r}); find what aborts every request (an abort loop, "
                "engine.on_weight_update: abort with constant weight updates) or restart the engine"
            )
        if self.idle_aborts:
            await asyncio.sleep(min(ABORT_BACKOFF_S * 2 ** (self.idle_aborts - 1), 2.0))

    def _sampling(self, max_new: int) -> SamplingParams:
        """The run's sampling settings for the next ``max_new`` tokens (a runner variant may add stop strings)."""
        cfg = self.ctx.config
        return SamplingParams(
            max_new_tokens=max_new,
            temperature=cfg.temperature,
            stop_token_ids=self.ctx.assembler.stop_token_ids,
            stop=tuple(cfg.stop),
        )

    async def _generate(self, turn: TurnRecord, input_ids: list[int], max_new: int) -> tuple[str, object]:
        sampling = self._sampling(max_new)
        self.failure_source = "engine"
        self.request_id = new_request_id()
        started = time.perf_counter()
        version = self.ctx.engine.weight_version
        try:
            result = await self.ctx.engine.generate(input_ids, sampling, self.request_id)
        finally:
            self.request_id = None
            self.ctx.metrics.engine_time_s += time.perf_counter() - started
        self.failure_source = "ledger"
        if turn.num_tokens:  # a resumed turn: a stop string may straddle the cut
            before = self.ledger.current_turn_ids()
            result = cut_at_straddling_stop(before, result, sampling.stop, self.ledger.assembler.decode)
        self.ledger.append_sampled(result.output_ids, result.logprobs, result.token_versions(), turn.index)
        turn.num_tokens += len(result.output_ids)
        turn.finish_reason = result.finish_reason
        self.ctx.metrics.tokens_generated += len(result.output_ids)
        self.ctx.metrics.prompt_tokens += result.prompt_tokens
        self.ctx.metrics.cached_prompt_tokens += result.cached_tokens
        self.sent.count(self.ctx.metrics, input_ids, version, result.prompt_tokens - result.cached_tokens)
        self.sent.sent(input_ids, result.output_ids, version)
        return result.finish_reason, result.extra.get("message")

    async def _step(self, turn: TurnRecord) -> None:
        """Give the turn's text to the env, record its answer, and render it (mask 0)."""
        text = self.ledger.decode_turn(self.ledger.current_turn_ids())
        self.ledger.end_turn(text)
        turn.action = text
        result = checked_step(self.env, await self._call_env("step", text))
        observation, terminated, truncated = result.messages, result.terminated, result.truncated
        info = as_recorded(result.info)
        turn.reward = result.reward
        turn.env_messages = as_recorded(observation)
        turn.info = info
        self.ctx.metrics.sandbox_time_s += float(info.get("sandbox_time_s", 0.0) or 0.0)
        self._take_cap(info)
        self.env_method = "snapshot"
        snapshot = self.env.snapshot() if self.env is not None else None
        self.episode.env_snapshot = as_recorded(snapshot) if snapshot is not None else None
        failure = info.get(INFRA_FAILURE)
        if failure:  # not the policy's doing: kept, counted, left out of the loss (agentrl.algos.credit)
            self.episode.infra_failure = str(failure)[:500]
            self.ctx.metrics.infra_failures += 1
        for flag in hack_flags(info):
            if flag not in self.episode.hack_flags:
                self.episode.hack_flags.append(flag)
        note_canary(self.episode, info)
        components = info.get("reward_components")
        if isinstance(components, dict):
            self.episode.reward_components = {k: float(v) for k, v in components.items()}
        if terminated or truncated or failure or len(self.episode.turns) >= self.max_turns:
            self._finish("complete" if terminated else "truncated", info.get("outcome"))
            return
        self.failure_source = "ledger"
        self.ledger.append_env(list(observation))

    def _finish(self, status: str, outcome: Any = None) -> None:
        """R_i: the env's separate outcome when it gave one, else its ``cutoff_outcome`` when it declares one, else
        the return (sum of the turn rewards)."""
        self.episode.status = status  # type: ignore[assignment]
        rewards = [t.reward for t in self.episode.turns if t.reward is not None]
        if outcome is None:
            outcome = getattr(self.env, "cutoff_outcome", None)
        self.episode.outcome = float(outcome) if outcome is not None else None
        self.episode.final_reward = self.episode.outcome if outcome is not None else float(sum(rewards))
        check_canary(self.episode)
        if self.episode.infra_failure:  # no score of the policy's: not a reward of 0 in the step's means
            self.episode.final_reward = None
        self.ctx.metrics.completed += 1


def make_episode(episode_id: str, task_id: str, group_id: str, seed: int, env_id: str, version: int) -> Episode:
    """A fresh, not yet started episode of a task (reset options carry the task id)."""
    return Episode(
        episode_id=episode_id,
        task_id=task_id,
        group_id=group_id,
        env_id=env_id,
        seed=seed,
        reset_options={"task_id": task_id},
        created_version=version,
    )


EnvFactory = Callable[[], MultiTurnEnv]
