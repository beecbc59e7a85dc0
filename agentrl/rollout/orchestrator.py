"""The rollout orchestrator: concurrent episodes, groups, partial rollouts, durable step boundaries.

Invariant: a step ends with no generation in flight; what it changed (handed, ready, in-flight
and dropped groups plus the dataset cursor) is written to the buffer in one transaction, so a
kill at any moment resumes from the last boundary: no prompt is lost or handed out twice.
With ``rollout.dynamic_sampling`` a complete group the ``group_filter`` finds without learning signal is
filtered out (written to the buffer as such, archived, never trained) and replaced by a fresh group.
Episodes run on ``EpisodeRunner`` unless the env class names another runner in ``episode_runner``
(an ``EpisodeRunner`` subclass: the agent gateway's episodes are driven by an outside agent program).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat import ChatAssembler
from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import InferenceEngine
from agentrl.env import MultiTurnEnv
from agentrl.errors import ConfigError, EngineConfigError, RolloutError
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset, task_seed
from agentrl.rollout.drop_alarm import DropAlarm, drop_rate
from agentrl.rollout.env_threads import DaemonThreadPool
from agentrl.rollout.fingerprint import rollout_fingerprints
from agentrl.rollout.groups import GroupRun
from agentrl.rollout.metrics import RolloutMetrics, success_rate
from agentrl.rollout.replay import restore_episode_env
from agentrl.rollout.runner import FINISHED, EpisodeRunner, RunContext, make_episode
from agentrl.rollout.staleness import decide, staleness
from agentrl.rollout.tracebacks import TracebackLog
from agentrl.trajectory import Episode

CLOSE_WAIT_S = 5.0  # closing: how long in-flight env calls may take to return before their episodes are abandoned


@dataclass
class StepBatch:
    """What one step collected: B complete groups of G episodes, dropped groups, metrics."""

    step: int
    groups: list[list[Episode]]
    metrics: dict[str, float]
    dropped: list[list[Episode]] = field(default_factory=list)
    exhausted: bool = False  # the dataset is used up and nothing is left in flight


class RolloutOrchestrator:
    """Collects groups of episodes each step against any engine (see the module docstring)."""

    def __init__(
        self,
        engine: InferenceEngine,
        env_factory: Callable[[], MultiTurnEnv],
        tokenizer: Any,
        config: RolloutConfig,
        *,
        dataset: TaskDataset,
        buffer: RolloutBuffer | None = None,
        group_filter: Callable[[Sequence[Episode]], bool] | None = None,
        step_timeout_s: float | None = None,
        tracebacks: TracebackLog | None = None,
    ) -> None:
        """``group_filter(episodes)``: True when a complete group carries learning signal (``agentrl.algos.credit``);
        required by ``rollout.dynamic_sampling``, and when given, the signal groups per batch are logged.
        ``step_timeout_s`` (env.step_timeout_s) fails an episode whose env call runs longer; ``tracebacks`` keeps the
        tracebacks of env failures (in the run directory)."""
        if config.dynamic_sampling and group_filter is None:
            raise ConfigError(
                "rollout.dynamic_sampling needs a group filter (the trainer builds it from algorithm.turn_advantage: "
                "agentrl.algos.credit.signal_filter); pass group_filter= or set rollout.dynamic_sampling=false"
            )
        self._group_filter = group_filter
        self._filtered: list[GroupRun] = []  # this step's groups filtered out for lack of signal
        self.engine, self.env_factory, self.config, self.dataset, self.buffer = (
            engine,
            env_factory,
            config,
            dataset,
            buffer,
        )
        probe = env_factory()
        self.env_id = (
            getattr(getattr(probe, "spec", None), "id", None) or f"{type(probe).__module__}:{type(probe).__qualname__}"
        )
        assembler = ChatAssembler(
            tokenizer, tools=probe.tool_schemas() or None, template_mismatch=config.template_mismatch
        )
        self._runner_cls: type[EpisodeRunner] = getattr(type(probe), "episode_runner", None) or EpisodeRunner
        self._idle_envs: list[MultiTurnEnv] = [probe]
        self._executor = DaemonThreadPool(config.concurrency, thread_name_prefix="agentrl-env")
        self._ctx = RunContext(
            engine, config, assembler, self._executor, RolloutMetrics(), step_timeout_s, tracebacks=tracebacks
        )
        self._groups: list[GroupRun] = []  # ready and in-flight groups, in admission order
        self._loaded = buffer is None
        self._drops = DropAlarm(config.max_drop_rate, config.prompts_per_step)
        self.restore_log: list[tuple[str, str, str]] = []  # (episode id, snapshot|replay|restart, reason)
        self._step, self._engine_failures = 0, 0  # engine-failed groups of the step being collected
        # Versions the trainer will be ahead of the engine when this collection is trained: 0 in sync mode,
        # 1 while async mode collects step k+1 during update k. Staleness is judged at the training version.
        self.version_lead = 0
        if buffer is not None:
            buffer.bind_fingerprints(rollout_fingerprints(tokenizer, engine))
            state = buffer.dataset_state()
            if state is not None:
                dataset.load_state(state)

    @property
    def assembler(self) -> ChatAssembler:
        """The chat assembler episodes are rendered with."""
        return self._ctx.assembler

    async def load(self) -> str:
        """Load the groups the buffer carries (else the first step does); a line saying what was restored."""
        if not self._loaded:
            await self._load_from_buffer()
            self._loaded = True
        states = Counter(g.state for g in self._groups)
        methods = Counter(method for _, method, _ in self.restore_log)
        return (
            f"{len(self._groups)} groups carried ({states['ready']} complete, {states['inflight']} in flight); "
            f"{len(self.restore_log)} partial episodes restored ({methods['replay']} by replay, {methods['snapshot']} "
            f"from a snapshot, {methods['restart']} restarted)"
        )

    async def collect_step(self, step: int) -> StepBatch:
        """Run episodes until B groups are complete; abort and keep the rest (partial rollouts)."""
        started = time.perf_counter()
        metrics = self._ctx.metrics = RolloutMetrics()
        self._step, self._engine_failures, self._filtered = step, 0, []
        await self.load()
        await self._admit_carried()
        dropped: list[GroupRun] = []
        await self._run_until_ready(dropped)
        await self._stop_runners([r for g in self._groups for r in g.runners])
        await self._settle(dropped)  # members may have finished while stopping
        metrics.aborted += sum(1 for g in self._groups for r in g.runners if r.episode.status == "partial")
        batch = [g for g in self._groups if g.state == "ready"][: self.config.prompts_per_step]
        await self._check_drops(dropped, trained=len(batch))
        for group in batch:
            group.state, group.step = "handed", step
        self._groups = [g for g in self._groups if g.state != "handed"]
        if self.buffer is not None:
            stored = [g.stored() for g in batch + dropped + self._filtered + self._groups]
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self.buffer.write_boundary, step, stored, self.dataset.state()
            )
        version = self.engine.weight_version + self.version_lead
        for group in batch:
            metrics.staleness.update(staleness(e, version) for e in group.episodes)
        out = metrics.as_dict(time.perf_counter() - started)
        rewards = [e.final_reward for g in batch for e in g.episodes if e.final_reward is not None]
        out["rollout/reward_mean"] = sum(rewards) / len(rewards) if rewards else 0.0
        out["rollout/groups_carried"] = float(len(self._groups))
        out["rollout/drop_rate"] = drop_rate(len(dropped), len(batch))
        if self._group_filter is not None:
            out["rollout/signal_groups"] = float(sum(self._group_filter(g.episodes) for g in batch))
        out["rollout/success_rate"] = success_rate([e for g in batch + self._filtered for e in g.episodes])
        exhausted = self.dataset.exhausted() and not self._groups
        return StepBatch(step, [g.episodes for g in batch], out, [g.episodes for g in dropped], exhausted)

    def commit_step(self, step: int) -> None:
        """The trainer used step ``step``'s batch: mark its groups trained (one transaction)."""
        if self.buffer is not None:
            self.buffer.commit_step(step)

    async def _run_until_ready(self, dropped: list[GroupRun]) -> None:
        need = self.config.prompts_per_step
        target = math.ceil(self.config.over_sample * need) if self.config.partial_rollout else need
        while True:
            await self._settle(dropped)
            await self._check_drops(dropped)
            if self._batch_complete(need):
                return  # checked before admitting: carried ready groups may already fill the step
            await self._fill(target)
            self._launch()
            pending = {r.task for g in self._groups for r in g.runners if r.task is not None and not r.task.done()}
            if not pending:
                if not self._groups or self.dataset.exhausted():
                    return
                continue  # groups settled or dropped: fill again
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    def _batch_complete(self, need: int) -> bool:
        """B groups can be handed: any B complete ones (batch_order finish), or the B oldest (start).

        ``self._groups`` is in start order (carried groups first, then by dataset position), so under
        ``start`` which groups train never depends on how long their replies are.
        """
        if self.config.batch_order == "start":
            return len(self._groups) >= need and all(g.state == "ready" for g in self._groups[:need])
        return sum(g.state == "ready" for g in self._groups) >= need

    async def _fill(self, target: int) -> None:
        """Admit new groups from the dataset until ``target`` groups are ready or in flight."""
        while len(self._groups) < target:
            issued = self.dataset.next()
            if issued is None:
                return
            seq, task_id = issued
            group_id = f"{seq:08d}:{task_id}"
            runners = [
                self._runner_cls(self._new_episode(task_id, group_id), await self._acquire_env(), self._ctx)
                for _ in range(self.config.group_size)
            ]
            self._ctx.metrics.started += len(runners)
            self._groups.append(GroupRun(group_id, task_id, seq, runners))

    def _new_episode(self, task_id: str, group_id: str) -> Episode:
        return make_episode(
            uuid.uuid4().hex, task_id, group_id, task_seed(task_id), self.env_id, self.engine.weight_version
        )

    async def _acquire_env(self) -> MultiTurnEnv:
        if self._idle_envs:
            return self._idle_envs.pop()
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.env_factory)

    def _launch(self) -> None:
        """Start (or resume) a task for every unfinished member of every in-flight group."""
        for group in self._groups:
            for runner in group.runners:
                if runner.finished or (runner.task is not None and not runner.task.done()):
                    continue
                if runner.episode.status == "partial":
                    runner.episode.resumed += 1
                    self._ctx.metrics.resumed += 1
                runner.stop_requested = False
                runner.task = asyncio.create_task(runner.run())

    async def _settle(self, dropped: list[GroupRun]) -> None:
        """Move finished groups to ready (or filter them out); drop (or fail on) groups with a failed member."""
        for group in list(self._groups):
            failed = group.failed_runner()
            if failed is not None and group.state != "dropped":
                await self._on_failure(group, failed)
                group.state, group.step = "dropped", self._step  # archived with this step (not an earlier one)
                self._groups.remove(group)
                dropped.append(group)
                self._ctx.metrics.groups_dropped += 1
                self._ctx.metrics.dropped += len(group.runners)
            elif group.state == "inflight" and group.finished:
                if self._filters_out(group):
                    group.state, group.step = "filtered", self._step  # the step, for ``agentrl inspect --step``
                    self._groups.remove(group)
                    self._filtered.append(group)
                    self._ctx.metrics.groups_filtered += 1
                else:
                    group.state = "ready"
            self._release_envs(group)

    def _filters_out(self, group: GroupRun) -> bool:
        """Dynamic sampling: the group has no signal and this step may still filter one more. Never a canary group
        (``info["canary"]``): its pass rate is measured whatever its rewards (it is not trained on anyway)."""
        return (
            self.config.dynamic_sampling
            and not any(episode.canary for episode in group.episodes)
            and self._group_filter is not None
            and len(self._filtered) < self.config.max_filtered_groups
            and not self._group_filter(group.episodes)
        )

    async def _on_failure(self, group: GroupRun, failed: EpisodeRunner) -> None:
        """Raise when the config says failures are fatal, the engine is gone, or it failed more often than
        ``rollout.engine_retries`` this step; else stop the siblings (the group is dropped and replaced)."""
        error = failed.episode.error
        if self.config.on_failure == "fail":
            await self._stop_runners([r for g in self._groups for r in g.runners])
            raise RolloutError(
                f"episode {failed.episode.episode_id} (task {group.task_id!r}) failed: {error}. The buffer keeps the "
                "last step boundary; fix the cause and resume, or set rollout.on_failure=drop to drop failed groups"
            )
        if failed.failure_source == "engine":
            self._engine_failures += 1
            healthy = await self._engine_healthy()
            if not healthy or self._engine_failures > self.config.engine_retries:
                await self._stop_runners([r for g in self._groups for r in g.runners])
                state = "and its health check fails" if not healthy else "although its health check passes"
                raise RolloutError(
                    f"the inference engine failed {self._engine_failures} time(s) in step {self._step} "
                    f"(rollout.engine_retries={self.config.engine_retries}) {state}; last failure: {error}. Nothing "
                    "was written for this step, the buffer keeps the last step boundary and the groups it holds: fix "
                    "or restart the engine and resume the run (--resume RUN_DIR)"
                )
        await self._stop_runners(group.runners)

    async def _check_drops(self, dropped: list[GroupRun], trained: int | None = None) -> None:
        """Stop the step (RolloutError naming the last errors) once it has dropped too many groups."""
        problem = self._drops.problem([g.episodes for g in dropped], trained)
        if problem is not None:
            await self._stop_runners([r for g in self._groups for r in g.runners])
            raise RolloutError(f"{problem}. Nothing was written for this step: the buffer keeps the last boundary")

    async def _engine_healthy(self) -> bool:
        try:
            return bool(await asyncio.wait_for(self.engine.health(), timeout=10.0))
        except Exception:  # an unreachable engine raises in many ways; all mean "unhealthy"
            return False

    async def _stop_runners(self, runners: list[EpisodeRunner], give_up_s: float | None = None) -> None:
        """Ask runners to stop and abort their requests until every task returned (partial output kept).

        ``give_up_s`` (closing): after that long, a runner still inside an env call is cancelled and its env
        abandoned, so a step that never returns cannot hold the job open.
        """
        for runner in runners:
            runner.stop_requested = True
        deadline = None if give_up_s is None else time.monotonic() + give_up_s
        while True:
            pending = {r.task for r in runners if r.task is not None and not r.task.done()}
            if not pending:
                return
            if deadline is not None and time.monotonic() > deadline:
                for runner in runners:
                    if runner.task is not None and not runner.task.done():
                        runner.env_abandoned = True
                        runner.task.cancel()
                await asyncio.wait(pending, timeout=1.0)
                return
            rids = [r.request_id for r in runners if r.request_id is not None]
            if rids:
                try:
                    await self.engine.abort(rids)
                except EngineConfigError as exc:  # aborts are impossible: waiting would stall every boundary
                    raise RolloutError(f"cannot abort the step's in-flight requests: {exc}") from exc
                except Exception:  # a dead engine cannot abort; its generate calls fail on their own
                    pass
            # Re-abort periodically: a request may reach a remote engine after its abort did.
            await asyncio.wait(pending, timeout=0.2)

    def _release_envs(self, group: GroupRun) -> None:
        for runner in group.runners:
            if runner.env_abandoned:  # a call on it may still run on a worker thread: never hand it out again
                runner.env = None
            elif runner.finished and runner.env is not None and (runner.task is None or runner.task.done()):
                self._idle_envs.append(runner.env)
                runner.env = None

    async def _admit_carried(self) -> None:
        """Apply the staleness bound to every carried group (at admission, and at load)."""
        version = self.engine.weight_version + self.version_lead
        for group in self._groups:
            for slot, runner in enumerate(group.runners):
                if runner.episode.status == "failed":
                    continue
                if (
                    decide(runner.episode, version, self.config.max_staleness, self.config.staleness_policy)
                    == "restart"
                ):
                    env = runner.env or await self._acquire_env()
                    self._ctx.metrics.stale_discarded_tokens += sum(s.num_sampled for s in runner.episode.segments)
                    group.runners[slot] = self._runner_cls(
                        self._new_episode(group.task_id, group.group_id), env, self._ctx
                    )
                    self._ctx.metrics.restarted += 1
                    group.state = "inflight"

    async def _load_from_buffer(self) -> None:
        """Rebuild groups from the buffer: handed-but-untrained first, then ready, then in flight."""
        assert self.buffer is not None
        stored = self.buffer.load_groups(("handed", "ready", "inflight"))
        stored.sort(key=lambda g: (g.state != "handed", g.seq))
        loop = asyncio.get_running_loop()
        for sg in stored:
            runners = []
            for episode in sg.episodes:
                if episode.status in FINISHED:
                    runners.append(self._runner_cls(episode, None, self._ctx))
                    continue
                env = await self._acquire_env()
                outcome = await loop.run_in_executor(self._executor, restore_episode_env, env, episode)
                self.restore_log.append((episode.episode_id, outcome.method, outcome.reason))
                if outcome.method == "restart":
                    episode = self._new_episode(sg.task_id, sg.group_id)
                    self._ctx.metrics.restarted += 1
                runners.append(self._runner_cls(episode, env, self._ctx))
            group = GroupRun(sg.group_id, sg.task_id, sg.seq, runners)
            group.state = "ready" if group.finished and not group.failed_runner() else "inflight"
            self._groups.append(group)

    async def close(self) -> None:
        """Stop in-flight episodes (their state is in the buffer as of the last boundary) and close envs."""
        runners = [r for g in self._groups for r in g.runners]
        await self._stop_runners(runners, give_up_s=CLOSE_WAIT_S)
        envs = self._idle_envs + [r.env for r in runners if r.env is not None and not r.env_abandoned]
        self._idle_envs, self._groups = [], []
        for env in envs:
            try:
                env.close()
            except Exception:  # closing is best effort; one env's failure must not leak the others
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)
