"""``rollout.task_order: stratified``: every task once per epoch, as ``shuffle``, but any window of the stream
holds each stratum (a task id's part before its last '/') in about its share of the whole; on the main job's
train split a step's six tasks then keep the family mix that ``shuffle`` lets swing from step to step."""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest

from agentrl.errors import RolloutBufferError
from agentrl.rollout.dataset import TaskDataset, epoch_order, stratum_of

# the main job's train split: 27 + 22 + 16 + 11 + 9 tasks of five families
SIZES = {"arith": 27, "count_chars": 22, "strip_affix": 16, "list_map": 11, "slices": 9}
IDS = [f"gen-s0/{family}/{i:03d}" for family, n in SIZES.items() for i in range(n)]
STEP = 6


def _windows(order: str, seed: int) -> list[Counter[str]]:
    dataset = TaskDataset(IDS, seed=seed, epochs=1, order=order)  # type: ignore[arg-type]
    stream = [dataset.next() for _ in range(len(IDS))]
    assert sorted(task for _, task in stream) == sorted(IDS)  # each task exactly once in the epoch
    tasks = [task for _, task in stream]
    starts = range(0, len(IDS) - STEP + 1, STEP)
    return [Counter(stratum_of(t).split("/")[1] for t in tasks[i : i + STEP]) for i in starts]


def test_a_stratified_step_keeps_the_family_mix_that_a_shuffled_one_lets_swing() -> None:
    share = {family: n / len(IDS) * STEP for family, n in SIZES.items()}  # expected per 6-task step

    def worst_gap(order: str) -> float:
        gaps = [max(abs(w[f] - share[f]) for f in SIZES) for seed in range(20) for w in _windows(order, seed)]
        return statistics.fmean(gaps)

    stratified, shuffled = worst_gap("stratified"), worst_gap("shuffle")
    # a family's count in a stratified step is its share rounded up or down (off by < 1 up to the phase)
    assert all(
        max(abs(w[f] - share[f]) for f in SIZES) < 1.5 for seed in range(20) for w in _windows("stratified", seed)
    )
    assert stratified < 0.6 * shuffled, (stratified, shuffled)


def test_the_order_is_seeded_and_differs_by_epoch_and_seed() -> None:
    first = epoch_order(list(IDS), random.Random("3:0"), "stratified")
    assert first == epoch_order(list(IDS), random.Random("3:0"), "stratified")
    assert first != epoch_order(list(IDS), random.Random("3:1"), "stratified")
    assert first != epoch_order(list(IDS), random.Random("4:0"), "stratified")
    assert stratum_of("plain") == "" and stratum_of("a/b/c") == "a/b"


def test_a_resume_with_another_order_is_refused() -> None:
    stratified = TaskDataset(IDS, seed=0, order="stratified")
    stratified.next()
    shuffled = TaskDataset(IDS, seed=0)
    with pytest.raises(RolloutBufferError, match="does not match"):
        shuffled.load_state(stratified.state())
    again = TaskDataset(IDS, seed=0, order="stratified")
    again.load_state(stratified.state())
    assert again.next() == stratified.next()
