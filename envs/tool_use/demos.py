"""Scripted ToolUse-v0 episodes: the calls a careful agent makes, played through the env itself.

They are the chats of a supervised warm-up (``scripts/tool_agent_chats.py`` writes them, ``scripts/warmup_sft.py``
trains on them): a base model that never makes a valid call gives RL no signal. Every tool message in a
demonstration is what the env returned for that call, so the chats teach exactly the env's protocol. A share of
them slips first (a misspelled country or field, answered by the tool's error) and then fixes the call, so the
model has seen an error message followed by a corrected call.
"""

from __future__ import annotations

import random
from typing import Any

from agentrl.env import Message, assistant
from agentrl.tools.toolcall import format_tool_call
from envs.tool_use.env import ToolUseEnv
from envs.tool_use.questions import Question


class DemonstrationError(RuntimeError):
    """A scripted episode did not earn its reward: the script and the env disagree."""


def _countries(question: Question) -> list[str]:
    from envs.tool_use.tools import country_table

    # In the order the question names them: the answer's first operand comes first.
    named = [c for c in country_table() if c in question.text]
    return sorted(named, key=question.text.index)


def _plan(question: Question) -> list[list[tuple[str, dict[str, Any]]]]:
    """The demonstration's tool turns: each a list of (tool, arguments)."""
    kind, countries = question.kind, _countries(question)
    if kind == "calc":
        return [[("calculator", {"expression": question.text.removeprefix("What is ").rstrip("?")})]]
    if kind == "convert":
        words = question.text.split()
        return [[("convert_units", {"value": float(words[1]), "from_unit": words[2], "to_unit": words[4].rstrip(".")})]]
    if kind == "lookup":
        field = next(
            f for f in ("population_millions", "area_km2", "capital", "continent", "currency") if _asks(question, f)
        )
        return [[("lookup", {"country": countries[0], "field": field})]]
    density = "density" in question.text
    area = kind in ("area_sum", "area_diff")
    fields = ["population_millions", "area_km2"] if density else ["area_km2" if area else "population_millions"] * 2
    targets = [countries[0], countries[0]] if density else countries[:2]
    lookups = [("lookup", {"country": c, "field": f}) for c, f in zip(targets, fields)]
    a, b = (_fact_of(c, f) for c, f in zip(targets, fields))
    if kind == "pop_ratio":
        a, b = b, a  # the question names the divisor first
    if density:
        expression = f"{a} * 1000000 / {b}"
    elif kind == "pop_ratio":
        expression = f"{a} / {b}"
    elif kind in ("pop_diff", "area_diff"):
        expression = f"{a} - {b}"
    else:
        expression = f"{a} + {b}"
    return [lookups, [("calculator", {"expression": expression})]]


def _fact_of(country: str, field: str) -> float | str:
    from envs.tool_use.tools import lookup

    return lookup(country, field)


def _asks(question: Question, field: str) -> bool:
    words = {"population_millions": "population", "area_km2": "area", "capital": "capital"}
    return words.get(field, field) in question.text.lower()


def _slipped(call: tuple[str, dict[str, Any]], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """The same call with one argument mistyped, as a model might write it."""
    name, arguments = call
    if name != "lookup":
        return call
    wrong = dict(arguments)
    if rng.random() < 0.5:
        wrong["country"] = arguments["country"][:-1]  # "Kenya" -> "Keny"
    else:
        wrong["field"] = {"population_millions": "population", "area_km2": "area"}.get(arguments["field"], "name")
    return name, wrong


def _calls_text(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join(format_tool_call(name, arguments) for name, arguments in calls)


def demonstration(env: ToolUseEnv, task_id: str, *, slip: bool = False, seed: int = 0) -> list[Message]:
    """The chat of one scripted episode of ``task_id`` on ``env`` (raises ``DemonstrationError`` if it fails)."""
    rng = random.Random(f"{task_id}/{seed}")
    chat, _ = env.reset(seed=seed, options={"task_id": task_id})
    turns = _plan(env.question)
    if slip and env.question.kind != "calc" and env.question.kind != "convert":
        first = turns[0]
        turns = [[_slipped(first[0], rng), *first[1:]], [first[0]], *turns[1:]]
    for calls in turns:
        action = _calls_text(calls)
        observation, *_ = env.step(action)
        chat += [assistant(action), *observation]
    action = f"Answer: {_format(env.question.answer)}"
    _, _, terminated, _, info = env.step(action)
    if not (terminated and info.get("success")):
        raise DemonstrationError(f"the scripted episode of {task_id} did not succeed: {info}")
    return [*chat, assistant(action)]


def _format(value: float | str) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
