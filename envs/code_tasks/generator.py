"""Deterministic generation of the task set and its splits.

Draw ``i`` of family ``f`` uses ``random.Random(f"code_tasks/{seed}/{f}/{i}")`` (string seeds hash
with SHA-512, so every run and platform gets the same tasks). A draw whose behaviour key was seen
before is skipped. Splits: every draw of a held-out family is ``test_kinds``; for a trained family,
the key's hash alone puts ``test_fifths`` in five behaviours in ``test_instances``, the next
``validation_fifths`` in ``validation`` (tasks of the trained families that are never trained on, for
choosing settings without touching the held-out splits) and the rest in ``train``, so no seed or count
can move a behaviour between train and the held-out splits.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrl.errors import ConfigError, did_you_mean
from envs.code_tasks.build import build_task
from envs.code_tasks.families import FAMILIES
from envs.code_tasks.task import GeneratedTask

Split = Literal["train", "validation", "test_instances", "test_kinds", "test", "all"]
# One held-out family per domain that has enough families to spare one.
DEFAULT_HELDOUT = ("predicates", "rotate", "windows", "fizzbuzz", "parse_numbers")
_MAX_DRAWS = 400


class GeneratorConfig(BaseModel):
    """Seed, per-family counts and held-out families of the procedural coding tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(0, description="Generator seed: the same seed gives byte-identical tasks.")
    train_per_family: int = Field(24, ge=1, description="At most this many train tasks per trained family.")
    test_per_family: int = Field(
        6, ge=0, description="At most this many test_instances per trained family (behaviours never trained on)."
    )
    test_fifths: int = Field(
        1,
        ge=1,
        le=3,
        description="Fifths of a trained family's behaviours (by the behaviour key's hash) held out as test_instances; "
        "2 holds out twice as many (a larger test_instances split, a smaller train split).",
    )
    validation_fifths: int = Field(
        0,
        ge=0,
        le=2,
        description="Fifths of a trained family's behaviours (after test_instances') kept out of train as the "
        "validation split: for choosing settings on tasks of the trained families without the held-out splits.",
    )
    validation_per_family: int = Field(8, ge=0, description="At most this many validation tasks per trained family.")
    kinds_per_family: int = Field(12, ge=0, description="At most this many test_kinds tasks per held-out family.")
    heldout_families: tuple[str, ...] = Field(
        DEFAULT_HELDOUT, description="Families never trained on (test_kinds); the others train."
    )
    families: tuple[str, ...] | None = Field(
        None,
        description="Generate only these families (None: all); e.g. the one-liner 'basics' families for a small model.",
    )

    @model_validator(mode="after")
    def _known_families(self) -> GeneratorConfig:
        for name in (*self.heldout_families, *(self.families or ())):
            if name not in FAMILIES:
                raise ConfigError(
                    f"{name!r} is not a task family; known: {sorted(FAMILIES)}." + did_you_mean(name, FAMILIES)
                )
        if self.test_fifths + self.validation_fifths > 4:
            raise ConfigError(
                f"test_fifths {self.test_fifths} + validation_fifths {self.validation_fifths} leave no fifth of a "
                "family's behaviours to train on; keep their sum at most 4"
            )
        if not set(self.families or FAMILIES) - set(self.heldout_families):
            raise ConfigError("heldout_families holds out every family, so nothing is left to train on")
        return self


def _split_of(key: str, family: str, config: GeneratorConfig) -> str:
    if family in config.heldout_families:
        return "test_kinds"
    fifth = hashlib.sha256(key.encode()).digest()[0] % 5
    if fifth < config.test_fifths:
        return "test_instances"
    return "validation" if fifth < config.test_fifths + config.validation_fifths else "train"


def _family_tasks(family: str, config: GeneratorConfig) -> dict[str, list[GeneratedTask]]:
    wanted = {
        "train": config.train_per_family,
        "test_instances": config.test_per_family,
        "validation": config.validation_per_family if config.validation_fifths else 0,
    }
    if family in config.heldout_families:
        wanted = {"test_kinds": config.kinds_per_family}
    found: dict[str, list[GeneratedTask]] = {split: [] for split in wanted}
    seen: set[str] = set()
    spec_of = FAMILIES[family]
    for index in range(_MAX_DRAWS):
        if all(len(found[s]) >= n for s, n in wanted.items()):
            break
        rng = random.Random(f"code_tasks/{config.seed}/{family}/{index}")
        spec = spec_of.draw(rng)
        split = _split_of(spec.key, family, config)
        if spec.key in seen or len(found[split]) >= wanted[split]:
            continue
        seen.add(spec.key)
        task = build_task(spec, rng, f"gen-s{config.seed}/{family}/{index:03d}", family, spec_of.domain)
        if task is not None:
            found[split].append(task)
    return found


def _interleave(groups: list[list[GeneratedTask]]) -> list[GeneratedTask]:
    """Round-robin over families, so the first N tasks of a split cover every family (eval.max_tasks)."""
    longest = max((len(g) for g in groups), default=0)
    return [group[i] for i in range(longest) for group in groups if i < len(group)]


@lru_cache(maxsize=8)
def _generate(config: GeneratorConfig) -> dict[str, tuple[GeneratedTask, ...]]:
    by_split: dict[str, list[list[GeneratedTask]]] = {
        "train": [],
        "validation": [],
        "test_instances": [],
        "test_kinds": [],
    }
    for family in config.families or tuple(FAMILIES):
        for split, tasks in _family_tasks(family, config).items():
            by_split[split].append(tasks)
    parts = {split: _interleave(groups) for split, groups in by_split.items()}
    parts["test"] = parts["test_kinds"] + parts["test_instances"]
    parts["all"] = parts["train"] + parts["validation"] + parts["test"]
    return {split: tuple(tasks) for split, tasks in parts.items()}


def generate_tasks(config: GeneratorConfig | None = None, split: Split = "all") -> list[GeneratedTask]:
    """The generated tasks of ``split``, families interleaved (cached per config; deterministic given the config)."""
    return list(_generate(config or GeneratorConfig())[split])


def write_jsonl(tasks: list[GeneratedTask], path: str) -> None:
    """Write tasks as JSON lines (one ``GeneratedTask`` per line)."""
    with open(path, "w", encoding="utf-8") as handle:
        for task in tasks:
            handle.write(task.model_dump_json() + "\n")
