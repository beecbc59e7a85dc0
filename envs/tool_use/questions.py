"""Tool-use questions, generated deterministically from their task id, with exact answers.

Kinds: ``calc`` (arithmetic), ``convert`` (units), ``lookup`` (table facts) for training, and
``multi`` (a lookup followed by arithmetic) held out as a whole kind; the last instances of each
training kind form ``test_instances``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from envs.tool_use.tools import calculator, convert_units, country_table

KINDS = ("calc", "convert", "lookup", "multi")
HELDOUT_KINDS = ("multi",)
_CONVERSIONS = (
    ("km", "m"),
    ("mile", "km"),
    ("ft", "m"),
    ("kg", "lb"),
    ("lb", "kg"),
    ("h", "min"),
    ("day", "h"),
    ("C", "F"),
    ("F", "C"),
    ("inch", "cm"),
)
_LOOKUP_FIELDS = {
    "capital": "What is the capital of {c}?",
    "continent": "On which continent is {c}?",
    "currency": "What is the currency of {c}?",
    "population_millions": "What is the population of {c}, in millions?",
    "area_km2": "What is the area of {c} in square kilometres?",
}


@dataclass(frozen=True)
class Question:
    """One question and its reference answer (a number or a string)."""

    task_id: str
    kind: str
    text: str
    answer: float | str


def _rng(task_id: str) -> random.Random:
    # A hash of the id (not Python's salted hash()) so every process builds the same question.
    return random.Random(int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big"))


def _calc(rng: random.Random) -> tuple[str, float | str]:
    a, b, c = rng.randint(12, 999), rng.randint(2, 99), rng.randint(1, 500)
    op = rng.choice(["+", "-"])
    expression = f"{a} * {b} {op} {c}"
    return f"What is {expression}?", float(calculator(expression))


def _convert(rng: random.Random) -> tuple[str, float | str]:
    source, target = rng.choice(_CONVERSIONS)
    value = rng.choice([rng.randint(1, 200), round(rng.uniform(1, 100), 1)])
    answer = round(convert_units(value, source, target), 2)
    return f"Convert {value} {source} to {target}. Round to 2 decimals.", answer


def _lookup(rng: random.Random) -> tuple[str, float | str]:
    country = rng.choice(sorted(country_table()))
    field = rng.choice(sorted(_LOOKUP_FIELDS))
    return _LOOKUP_FIELDS[field].format(c=country), country_table()[country][field]


def _multi(rng: random.Random) -> tuple[str, float | str]:
    first, second = rng.sample(sorted(country_table()), 2)
    if rng.random() < 0.5:
        table = country_table()
        answer = round(table[first]["population_millions"] + table[second]["population_millions"], 2)
        return f"What is the combined population of {first} and {second}, in millions?", answer
    density = country_table()[first]["population_millions"] * 1e6 / country_table()[first]["area_km2"]
    return f"What is the population density of {first} in people per square kilometre? Round to 2 decimals.", round(
        density, 2
    )


_MAKERS = {"calc": _calc, "convert": _convert, "lookup": _lookup, "multi": _multi}


def make_question(task_id: str) -> Question:
    """The question of ``task_id`` (``<kind>/<index>``), identical in every process."""
    kind = task_id.split("/", 1)[0]
    text, answer = _MAKERS[kind](_rng(task_id))
    return Question(task_id=task_id, kind=kind, text=text, answer=answer)


def question_ids(split: str, per_kind: int, heldout_per_kind: int) -> list[str]:
    """Task ids of ``split`` (train, test, test_kinds, test_instances, all)."""
    ids = {kind: [f"{kind}/{i:03d}" for i in range(per_kind)] for kind in KINDS}
    train = [i for k in KINDS if k not in HELDOUT_KINDS for i in ids[k][: per_kind - heldout_per_kind]]
    test_instances = [i for k in KINDS if k not in HELDOUT_KINDS for i in ids[k][per_kind - heldout_per_kind :]]
    test_kinds = [i for k in HELDOUT_KINDS for i in ids[k]]
    parts = {
        "train": train,
        "test_instances": test_instances,
        "test_kinds": test_kinds,
        "test": test_kinds + test_instances,
        "all": [i for k in KINDS for i in ids[k]],
    }
    return parts[split]
