"""The main job's task splits: >= 60 distinct held-out instances of the trained families, a validation split carved
from the trained families, none of them trained on (by the warm-up either)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from envs.code_tasks import GeneratorConfig, generate_tasks
from envs.code_tasks.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import warmup_code_agent  # noqa: E402


def _mainjob_generator() -> GeneratorConfig:
    return GeneratorConfig(**warmup_code_agent.generator_of(ROOT / "configs" / "quickstart.yaml"))


def _behaviour(task) -> tuple[str, str, str]:  # noqa: ANN001 - a GeneratedTask
    return (task.kind, task.signature, task.doc)


def test_the_main_job_holds_out_60_distinct_instances_of_its_trained_families_and_a_validation_split() -> None:
    config = _mainjob_generator()
    train, validation, instances, kinds = (
        generate_tasks(config, s) for s in ("train", "validation", "test_instances", "test_kinds")
    )
    trained = set(config.families or FAMILIES) - set(config.heldout_families)
    assert len(instances) >= 60 and {t.kind for t in instances} == trained
    assert len(validation) >= 30 and {t.kind for t in validation} == trained
    assert {t.kind for t in kinds} == set(config.heldout_families) and len(kinds) == 12
    # Distinct behaviours within each split, and no behaviour shared between splits (a task id differs per draw, so
    # the behaviour, what a function must do, is what must not repeat).
    for split in (train, validation, instances):
        assert len({_behaviour(t) for t in split}) == len(split)
    assert not {_behaviour(t) for t in train} & {_behaviour(t) for t in validation + instances}
    assert not {_behaviour(t) for t in validation} & {_behaviour(t) for t in instances}
    # Every family keeps tasks to train on, and no family fills most of the held-out split.
    assert min(Counter(t.kind for t in train).values()) >= 8
    assert max(Counter(t.kind for t in instances).values()) <= 20


def test_validation_and_test_shares_move_behaviours_only_out_of_train() -> None:
    small = GeneratorConfig(families=("arith", "count_chars", "predicates"), heldout_families=("predicates",))
    large = small.model_copy(update={"test_fifths": 2, "validation_fifths": 1, "test_per_family": 99})
    assert generate_tasks(small, "validation") == []  # off by default: other jobs' splits are as they were
    all_small = small.model_copy(update={"test_per_family": 99})
    small_test = {_behaviour(t) for t in generate_tasks(all_small, "test_instances")}
    large_test = {_behaviour(t) for t in generate_tasks(large, "test_instances")}
    assert small_test < large_test  # a larger share only adds held-out behaviours
    assert not {_behaviour(t) for t in generate_tasks(large, "train")} & (
        large_test | {_behaviour(t) for t in generate_tasks(large, "validation")}
    )


def test_the_warm_up_scripts_chats_from_the_main_jobs_own_train_split() -> None:
    from envs.code_agent.env import CodeAgentEnv

    tasks = warmup_code_agent.generator_of(ROOT / "configs" / "quickstart.yaml")
    assert tasks["test_fifths"] == 2 and tasks["validation_fifths"] == 1
    # What scripted_chats builds: the env of the config's generator (with the defaults' split, it would script
    # chats of what the main job holds out).
    env = CodeAgentEnv(split="train", tasks=tasks, sandbox={"kind": "process"}, canary_share=0.0)
    try:
        ids = set(env.task_ids())
    finally:
        env.close()
    config = _mainjob_generator()
    assert ids == {t.task_id for t in generate_tasks(config, "train")}
    held = generate_tasks(config, "test_instances") + generate_tasks(config, "validation")
    default_train = {_behaviour(t) for t in generate_tasks(GeneratorConfig(), "train")}
    assert default_train & {_behaviour(t) for t in held}  # why the warm-up must read the config


def test_shares_beyond_four_fifths_are_refused() -> None:
    with pytest.raises(ValueError, match="validation_fifths"):
        GeneratorConfig(test_fifths=3, validation_fifths=2)
