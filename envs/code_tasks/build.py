"""Turn a family's ``Spec`` into a task: pick visible examples and hidden tests by running the reference.

Only our own code runs here (the reference and the family's wrong variants, in-process). Invariants:
visible and hidden inputs differ; one visible example is an edge case that some wrong variant fails
(so a typical first attempt gets feedback it can act on); the hidden tests catch every wrong variant
they can, and a draw whose hidden tests catch none is rejected.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from agentrl.errors import AgentRLError
from envs.code_tasks.render import call_source
from envs.code_tasks.spec import Args, Spec
from envs.code_tasks.task import Case, GeneratedTask

VISIBLE_TYPICAL = 2
HIDDEN = 8
MIN_DISTINCT_ANSWERS = 3
_EXTRA_DRAWS = 40


class GeneratorError(AgentRLError, RuntimeError):
    """A task family produced a broken task (its reference raised or does not compile): a bug in the family."""


def compile_function(source: str, name: str) -> Callable[..., Any]:
    """The function ``name`` defined by ``source`` (trusted generator code only)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - our own reference/wrong sources
    return namespace[name]


def _fresh(args: Args) -> Args:
    """A copy a call may mutate: arguments are str/int or flat lists of them, so copying lists suffices."""
    return tuple(list(a) if isinstance(a, list) else a for a in args)


def _result(fn: Callable[..., Any], args: Args) -> tuple[str, Any]:
    try:
        value = fn(*_fresh(args))
    except Exception as exc:  # noqa: BLE001 - a wrong variant may raise anything; that is its verdict
        return ("raised", type(exc).__name__)
    return ("returned", value)


def _same(got: tuple[str, Any], expected: Any) -> bool:
    kind, value = got
    return kind == "returned" and type(value) is type(expected) and value == expected


class _Judge:
    """Expected values of a spec's inputs and which wrong variants each input catches."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.reference = compile_function(spec.solution, spec.entry_point)
        self.wrong = [compile_function(w, spec.entry_point) for w in spec.wrong]
        self._caught: dict[str, set[int]] = {}

    def expected(self, args: Args) -> Any:
        kind, value = _result(self.reference, args)
        if kind != "returned":
            raise GeneratorError(
                f"the reference of {self.spec.key} raised {value} on {args!r}; "
                "fix the family in envs/code_tasks/families"
            )
        return value

    def caught(self, args: Args) -> set[int]:
        key = repr(args)
        if key not in self._caught:
            expected = self.expected(args)
            self._caught[key] = {i for i, fn in enumerate(self.wrong) if not _same(_result(fn, args), expected)}
        return self._caught[key]


def _typical(spec: Spec, rng: random.Random, count: int, taken: set[str]) -> list[Args]:
    found: list[Args] = []
    for _ in range(count * 6):
        args = spec.sample(rng)
        if repr(args) not in taken:
            taken.add(repr(args))
            found.append(args)
            if len(found) == count:
                break
    return found


def _with_two_answers(
    judge: _Judge, visible: list[Args], edges: list[Args], rng: random.Random, taken: set[str]
) -> list[Args]:
    """``visible`` with its first typical input swapped for one whose answer differs, if all answers are equal.

    Candidates are the unused edge cases, then fresh samples; with none found the examples stay as they were.
    """
    answers = {repr(judge.expected(v)) for v in visible}
    if len(answers) > 1:
        return visible
    fresh = [judge.spec.sample(rng) for _ in range(_EXTRA_DRAWS)]  # drawn up front: the rng advances the same
    for args in (*edges, *fresh):
        if repr(judge.expected(args)) not in answers and (args in edges or repr(args) not in taken):
            taken.add(repr(args))
            return [args, *visible[1:]]
    return visible


def _choose_inputs(judge: _Judge, rng: random.Random) -> tuple[list[Args], list[Args], set[int]]:
    """(visible inputs, hidden inputs, indices of the wrong variants the hidden inputs catch)."""
    spec = judge.spec
    edges = list({repr(e): e for e in spec.edge_cases}.values())
    revealing = next((e for e in edges if judge.caught(e)), edges[0])
    taken = {repr(e) for e in edges}
    visible = [*_typical(spec, rng, VISIBLE_TYPICAL, taken), revealing]
    if spec.mixed_visible:
        visible = _with_two_answers(judge, visible, [e for e in edges if e != revealing], rng, taken)
    hidden = [e for e in edges if e not in visible]
    hidden += _typical(spec, rng, max(HIDDEN - len(hidden), 2), taken)
    caught = set().union(*(judge.caught(h) for h in hidden))
    for _ in range(_EXTRA_DRAWS):  # add inputs until every catchable wrong variant is caught
        if len(caught) == len(judge.wrong):
            break
        args = spec.sample(rng)
        new = judge.caught(args) - caught
        if new and repr(args) not in taken:
            taken.add(repr(args))
            hidden.append(args)
            caught |= new
    return visible, hidden, caught


def build_task(spec: Spec, rng: random.Random, task_id: str, kind: str, domain: str) -> GeneratedTask | None:
    """The task of ``spec``, or None when its hidden tests catch no wrong variant or have too few distinct answers."""
    judge = _Judge(spec)
    visible, hidden, caught = _choose_inputs(judge, rng)
    # A task whose answers are nearly constant is solved by returning that constant: reject it.
    answers = [judge.expected(h) for h in hidden]
    needed = 2 if all(isinstance(a, bool) for a in answers) else MIN_DISTINCT_ANSWERS
    if not caught or len({repr(a) for a in answers}) < needed:
        return None

    def case(args: Args) -> Case:
        return Case(call=call_source(spec.entry_point, args), expected=repr(judge.expected(args)))

    return GeneratedTask(
        task_id=task_id,
        kind=kind,
        domain=domain,
        entry_point=spec.entry_point,
        signature=spec.signature,
        doc=spec.doc,
        solution=spec.solution,
        wrong=[spec.wrong[i] for i in sorted(caught)],
        visible=[case(a) for a in visible],
        hidden=[case(a) for a in hidden],
    )
