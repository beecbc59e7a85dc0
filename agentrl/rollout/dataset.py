"""The task dataset: an ordered stream of task ids with a persistent cursor.

Invariant: the task at position ``i`` depends only on (task ids, seed, order, i), so a restored cursor
re-issues exactly the tasks a killed job had not yet stored; each epoch is a seeded permutation (``shuffle``) or
seeded permutations of the strata interleaved in proportion (``stratified``).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from agentrl.config.rollout import TaskOrder
from agentrl.errors import RolloutBufferError


def task_seed(task_id: str) -> int:
    """The env seed of a task: derived from the task id only, so all G group members agree."""
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


class TaskDataset:
    """Task ids issued in a seeded per-epoch order (``order``: see ``epoch_order``); ``cursor`` counts the tasks
    issued so far.

    An empty ``task_ids`` means the env has no task set: tasks are then ``"0", "1", ...``
    (``num_tasks`` of them, or unbounded when ``num_tasks`` is None).
    """

    def __init__(
        self,
        task_ids: list[str] | None = None,
        *,
        seed: int = 0,
        epochs: int | None = None,
        num_tasks: int | None = None,
        order: TaskOrder = "shuffle",
    ) -> None:
        self.task_ids = list(task_ids or [])
        self.order = order
        if not self.task_ids and num_tasks is not None:
            self.task_ids = [str(i) for i in range(num_tasks)]
        self.seed = seed
        self.epochs = epochs
        self.cursor = 0
        self._orders: dict[int, list[str]] = {}

    @classmethod
    def from_env(
        cls,
        env: Any,
        *,
        seed: int = 0,
        epochs: int | None = None,
        num_tasks: int | None = None,
        order: TaskOrder = "shuffle",
    ) -> TaskDataset:
        """Build the dataset from ``env.task_ids()`` when the env defines it (else seeds as ids)."""
        getter = getattr(env, "task_ids", None)
        ids = list(getter()) if callable(getter) else []
        if ids and num_tasks is not None:
            ids = ids[:num_tasks]
        return cls(ids, seed=seed, epochs=epochs, num_tasks=num_tasks, order=order)

    def __len__(self) -> int:
        """Tasks per epoch (0 when the stream is unbounded)."""
        return len(self.task_ids)

    @property
    def total(self) -> int | None:
        """Tasks the dataset will issue in all, or None when unbounded."""
        if not self.task_ids:
            return None
        return None if self.epochs is None else self.epochs * len(self.task_ids)

    def exhausted(self) -> bool:
        """True when every task of every epoch was issued."""
        total = self.total
        return total is not None and self.cursor >= total

    def task_at(self, index: int) -> str:
        """The task id at stream position ``index`` (independent of the cursor)."""
        if not self.task_ids:
            return str(index)
        epoch, offset = divmod(index, len(self.task_ids))
        if epoch not in self._orders:
            rng = random.Random(f"{self.seed}:{epoch}")
            self._orders = {epoch: epoch_order(self.task_ids, rng, self.order)}  # one epoch: the stream moves on
        return self._orders[epoch][offset]

    def next(self) -> tuple[int, str] | None:
        """Issue the next task: ``(position, task_id)``, or None when exhausted."""
        if self.exhausted():
            return None
        index = self.cursor
        self.cursor += 1
        return index, self.task_at(index)

    def state(self) -> dict[str, Any]:
        """JSON-able state stored in the rollout buffer at each step boundary."""
        return {
            "cursor": self.cursor,
            "seed": self.seed,
            "num_tasks": len(self.task_ids),
            "fingerprint": self.fingerprint(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore the cursor; refuses a state written for another task list or seed."""
        if state.get("fingerprint") != self.fingerprint() or state.get("seed") != self.seed:
            raise RolloutBufferError(
                f"the rollout buffer's dataset state (seed={state.get('seed')}, {state.get('num_tasks')} tasks) does "
                "not match "
                f"this dataset (seed={self.seed}, {len(self.task_ids)} tasks); resume with the same env config and "
                "rollout.seed, "
                "or start a new run directory"
            )
        self.cursor = int(state["cursor"])

    def fingerprint(self) -> str:
        """A hash of the task list (and of a non-default order), so a resumed run cannot silently use another."""
        order = [] if self.order == "shuffle" else [f"order={self.order}"]
        return hashlib.sha256("\n".join([*self.task_ids, *order]).encode("utf-8")).hexdigest()[:16]


def stratum_of(task_id: str) -> str:
    """A task's stratum: its id up to the last ``/`` (``gen-s0/arith/004`` -> ``gen-s0/arith``; no ``/``: one)."""
    return task_id.rpartition("/")[0]


def epoch_order(task_ids: list[str], rng: random.Random, order: TaskOrder) -> list[str]:
    """One epoch's order. ``stratified``: each stratum shuffled, its k-th of n tasks placed at (k + u) / n with u a
    random phase per stratum, then all sorted by place: any window of the epoch holds each stratum in about its
    share of the whole (a proportional interleave), and each task still comes once."""
    if order == "shuffle":
        shuffled = list(task_ids)
        rng.shuffle(shuffled)
        return shuffled
    strata: dict[str, list[str]] = {}
    for task_id in task_ids:
        strata.setdefault(stratum_of(task_id), []).append(task_id)
    placed: list[tuple[float, float, str]] = []
    for name in sorted(strata):
        members = strata[name]
        rng.shuffle(members)
        phase = rng.random()
        placed.extend(((k + phase) / len(members), rng.random(), task_id) for k, task_id in enumerate(members))
    return [task_id for _, _, task_id in sorted(placed)]
