"""Tool-use questions, generated deterministically from their task id, with exact answers.

Single-tool kinds: ``calc`` (arithmetic), ``convert`` (units), ``lookup`` (table facts), and ``multi``
(a lookup followed by arithmetic). Chained kinds need two table facts and a computation on them, so an
episode looks up, computes and answers over several turns: ``pop_sum``, ``pop_diff``, ``area_sum``,
``area_diff``, ``density`` and ``pop_ratio``. Which kinds train and which are held out as a whole kind is the env's
config (default: the single-tool kinds train, ``multi`` is held out). Within each training kind the
first questions train, the next ``validation_per_kind`` form ``validation`` and the last
``heldout_per_kind`` form ``test_instances``.

Each question lists the values its answer needs (the facts to look up and the result): the env pays a
turn whose tool results first return one of them (see ``ToolUseConfig.fact_reward``).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

from envs.tool_use.tools import calculator, convert_units, country_table

QuestionKind = Literal[
    "calc", "convert", "lookup", "multi", "pop_sum", "pop_diff", "area_sum", "area_diff", "density", "pop_ratio"
]
SINGLE_KINDS = ("calc", "convert", "lookup", "multi")
CHAINED_KINDS = ("pop_sum", "pop_diff", "area_sum", "area_diff", "density", "pop_ratio")
KINDS = SINGLE_KINDS + CHAINED_KINDS
DEFAULT_KINDS = SINGLE_KINDS
DEFAULT_HELDOUT_KINDS = ("multi",)
SPLITS = ("train", "validation", "test", "test_kinds", "test_instances", "all")
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
    """One question, its reference answer (a number or a string) and the values that answer needs."""

    task_id: str
    kind: str
    text: str
    answer: float | str
    needed: tuple[float | str, ...] = ()


Made = tuple[str, float | str, tuple[float | str, ...]]


def _rng(task_id: str) -> random.Random:
    # A hash of the id (not Python's salted hash()) so every process builds the same question.
    return random.Random(int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big"))


def _fact(country: str, field: str) -> float | str:
    return country_table()[country][field]


def _calc(rng: random.Random) -> Made:
    a, b, c = rng.randint(12, 999), rng.randint(2, 99), rng.randint(1, 500)
    op = rng.choice(["+", "-"])
    expression = f"{a} * {b} {op} {c}"
    answer = float(calculator(expression))
    return f"What is {expression}?", answer, (answer,)


def _convert(rng: random.Random) -> Made:
    source, target = rng.choice(_CONVERSIONS)
    value = rng.choice([rng.randint(1, 200), round(rng.uniform(1, 100), 1)])
    answer = round(convert_units(value, source, target), 2)
    return f"Convert {value} {source} to {target}. Round to 2 decimals.", answer, (answer,)


def _lookup(rng: random.Random) -> Made:
    country = rng.choice(sorted(country_table()))
    field = rng.choice(sorted(_LOOKUP_FIELDS))
    answer = _fact(country, field)
    return _LOOKUP_FIELDS[field].format(c=country), answer, (answer,)


def _multi(rng: random.Random) -> Made:
    first, second = rng.sample(sorted(country_table()), 2)
    if rng.random() < 0.5:
        return _PAIRED["pop_sum"].made(first, second)
    return _density_of(first)


@cache
def _pairs(kind: str) -> tuple[tuple[str, str], ...]:
    """Every unordered pair of table countries, in an order fixed by the kind (the same in every process)."""
    pairs = list(itertools.combinations(sorted(country_table()), 2))
    _rng(f"pairs/{kind}").shuffle(pairs)
    return tuple(pairs)


@dataclass(frozen=True)
class _PairedKind:
    """A chained kind on two countries: one fact of each, then one operation on the two facts."""

    kind: str
    field: str
    operation: Callable[[float, float], float]
    text: str  # with {first} and {second}
    larger_first: bool  # the country with the larger value is ``first`` (a difference or ratio above 0, above 1)

    def made(self, first: str, second: str) -> Made:
        a, b = _fact(first, self.field), _fact(second, self.field)
        answer = round(self.operation(a, b), 2)  # type: ignore[arg-type]
        return self.text.format(first=first, second=second), answer, (a, b, answer)

    def at(self, index: int) -> Made:
        """The kind's ``index``-th question: no two questions of a kind share a pair below the number of pairs, so
        test_instances never repeat a training question."""
        pairs = _pairs(self.kind)
        first, second = pairs[index % len(pairs)]
        if self.larger_first and _fact(first, self.field) < _fact(second, self.field):  # type: ignore[operator]
            first, second = second, first
        return self.made(first, second)


_PAIRED: dict[str, _PairedKind] = {
    paired.kind: paired
    for paired in (
        _PairedKind(
            "pop_sum",
            "population_millions",
            lambda a, b: a + b,
            "What is the combined population of {first} and {second}, in millions?",
            larger_first=False,
        ),
        _PairedKind(
            "pop_diff",
            "population_millions",
            lambda a, b: a - b,
            "How many million more people live in {first} than in {second}?",
            larger_first=True,
        ),
        _PairedKind(
            "area_sum",
            "area_km2",
            lambda a, b: a + b,
            "What is the combined area of {first} and {second} in square kilometres?",
            larger_first=False,
        ),
        _PairedKind(
            "area_diff",
            "area_km2",
            lambda a, b: a - b,
            "How many square kilometres larger is {first} than {second}?",
            larger_first=True,
        ),
        _PairedKind(
            "pop_ratio",
            "population_millions",
            lambda a, b: a / b,
            "How many times the population of {second} is the population of {first}? Round to 2 decimals.",
            larger_first=True,
        ),
    )
}


def _density_of(country: str) -> Made:
    people, area = _fact(country, "population_millions"), _fact(country, "area_km2")
    answer = round(people * 1e6 / area, 2)  # type: ignore[operator]
    text = f"What is the population density of {country} in people per square kilometre? Round to 2 decimals."
    return text, answer, (people, area, answer)


def _density(index: int) -> Made:
    countries = sorted(country_table())
    return _density_of(countries[index % len(countries)])


_MAKERS: dict[str, Callable[[random.Random], Made]] = {
    "calc": _calc,
    "convert": _convert,
    "lookup": _lookup,
    "multi": _multi,
}
# Chained questions are drawn from a fixed order of country pairs by their index (a seeded draw per id would
# repeat pairs, and a repeated pair would put a training question into test_instances).
_CHAINED: dict[str, Callable[[int], Made]] = {
    **{kind: paired.at for kind, paired in _PAIRED.items()},
    "density": _density,
}


def distinct_questions(kind: str) -> int | None:
    """How many different questions a chained kind has (its index wraps around after that); None: unbounded."""
    if kind == "density":
        return len(country_table())
    return len(_pairs(kind)) if kind in _CHAINED else None


def make_question(task_id: str) -> Question:
    """The question of ``task_id`` (``<kind>/<index>``), identical in every process."""
    kind = task_id.split("/", 1)[0]
    if kind in _CHAINED:
        text, answer, needed = _CHAINED[kind](int(task_id.split("/", 1)[1]))
    elif kind in _MAKERS:
        text, answer, needed = _MAKERS[kind](_rng(task_id))
    else:
        raise ValueError(f"unknown question kind {kind!r} in task id {task_id!r}; kinds: {', '.join(KINDS)}")
    return Question(task_id=task_id, kind=kind, text=text, answer=answer, needed=needed)


def question_ids(
    split: str,
    per_kind: int,
    heldout_per_kind: int,
    *,
    kinds: Sequence[str] = DEFAULT_KINDS,
    heldout_kinds: Sequence[str] = DEFAULT_HELDOUT_KINDS,
    validation_per_kind: int = 0,
) -> list[str]:
    """Task ids of ``split`` (one of ``SPLITS``), kind by kind in the order of ``kinds``."""
    ids = {kind: [f"{kind}/{i:03d}" for i in range(per_kind)] for kind in kinds}
    trained = [k for k in kinds if k not in heldout_kinds]
    first_test = per_kind - heldout_per_kind
    first_validation = first_test - validation_per_kind
    train = [i for k in trained for i in ids[k][:first_validation]]
    validation = [i for k in trained for i in ids[k][first_validation:first_test]]
    test_instances = [i for k in trained for i in ids[k][first_test:]]
    test_kinds = [i for k in kinds if k in heldout_kinds for i in ids[k]]
    parts = {
        "train": train,
        "validation": validation,
        "test_instances": test_instances,
        "test_kinds": test_kinds,
        "test": test_kinds + test_instances,
        "all": [i for k in kinds for i in ids[k]],
    }
    return parts[split]
