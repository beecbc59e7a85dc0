"""What a task family produces for one parameter draw: the function's contract, reference and plausible bugs.

A ``Spec`` is pure data plus an input sampler; ``envs.code_tasks.build`` turns it into a task by running
the reference (our own, trusted code) on edge cases and sampled inputs. ``key`` names the behaviour:
two draws with the same key are the same task, and the key alone decides the task's split.
"""

from __future__ import annotations

import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Args = tuple[Any, ...]


@dataclass(frozen=True)
class Spec:
    """One function-writing problem: signature, instruction, reference solution, wrong variants, inputs."""

    key: str
    entry_point: str
    params: str
    returns: str
    doc: str
    solution: str
    wrong: tuple[str, ...]
    edge_cases: tuple[Args, ...]
    sample: Callable[[random.Random], Args] = field(compare=False)
    # The visible examples show at least two different answers (else a constant passes them, and feedback
    # on them cannot tell a constant draft from a fix). Opt-in per family: switching it on changes tasks.
    mixed_visible: bool = False

    @property
    def signature(self) -> str:
        """The ``def`` line shown to the model."""
        return f"def {self.entry_point}({self.params}) -> {self.returns}:"


@dataclass(frozen=True)
class Family:
    """A named task family: ``draw(rng)`` picks its parameters and returns the spec they define."""

    name: str
    domain: str
    draw: Callable[[random.Random], Spec]


def source(template: str, **values: Any) -> str:
    """A function's source from an indented template; ``{name}`` fields are filled with ``values``."""
    return textwrap.dedent(template).strip("\n").format(**values) + "\n"


def words(rng: random.Random, vocabulary: tuple[str, ...], low: int, high: int) -> list[str]:
    """Between ``low`` and ``high`` words drawn from ``vocabulary`` (repeats allowed)."""
    return [rng.choice(vocabulary) for _ in range(rng.randint(low, high))]


def ints(rng: random.Random, low: int, high: int, lo_len: int = 1, hi_len: int = 7) -> list[int]:
    """A list of ``lo_len``..``hi_len`` integers in [low, high]."""
    return [rng.randint(low, high) for _ in range(rng.randint(lo_len, hi_len))]


WORDS = (
    "apple",
    "Banana",
    "cat",
    "dog",
    "eagle",
    "fig",
    "grape",
    "house",
    "ice",
    "jam",
    "kite",
    "lemon",
    "moon",
    "Night",
    "owl",
    "pear",
    "queen",
    "river",
    "sun",
    "tree",
    "umbrella",
    "violet",
    "wolf",
    "yak",
    "zebra",
    "an",
    "it",
    "Ocean",
    "arc",
    "sky",
    "Echo",
    "idea",
    "up",
    "orbit",
    "tiger",
    "a",
    "I",
)
