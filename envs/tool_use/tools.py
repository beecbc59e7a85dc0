"""The ToolUse environment's tools: a safe calculator, unit conversion and a country table lookup.

Each tool is a typed function with a docstring (its schema is derived by ``agentrl.tools``); bad
input raises ``ToolCallError`` with a message the model can act on. The calculator walks the AST
of an arithmetic expression and never calls ``eval``.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrl.errors import ToolCallError, did_you_mean
from agentrl.util.python_ast import parse_python

COUNTRIES_PATH = Path(__file__).resolve().parent.parent / "data" / "countries.json"
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 100  # 9**9**9 would hang the process; bound powers instead
# Factor to the base unit of each dimension (metre, kilogram, second).
_LINEAR_UNITS: dict[str, tuple[str, float]] = {
    "mm": ("length", 0.001),
    "cm": ("length", 0.01),
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "inch": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "mile": ("length", 1609.344),
    "g": ("mass", 0.001),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
    "day": ("time", 86400.0),
}
_TEMPERATURE_UNITS = ("C", "F", "K")


def _pow_bits(base: float | int, exponent: float | int) -> float:
    """Rough size in bits of base ** exponent, so nested powers cannot hang the process."""
    return abs(int(base)).bit_length() * max(float(exponent), 0.0)


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > _MAX_EXPONENT or _pow_bits(left, right) > 10_000):
            raise ToolCallError(f"a power is too large (exponents up to {_MAX_EXPONENT}, results up to ~3000 digits)")
        return _BINARY[type(node.op)](left, right)
    raise ToolCallError(f"unsupported syntax {ast.dump(node)[:60]!r}: use numbers, + - * / // % ** and parentheses")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with numbers, + - * / // % ** and parentheses.

    Args:
        expression: The expression, e.g. "(12 + 3) * 4.5".
    """
    try:
        tree = parse_python(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolCallError(
            f"cannot parse {expression!r} as arithmetic ({exc.msg}); write e.g. '(12 + 3) * 4.5'"
        ) from exc
    try:
        value = _evaluate(tree)
    except ZeroDivisionError as exc:
        raise ToolCallError(f"division by zero in {expression!r}") from exc
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(round(value, 6) if isinstance(value, float) else value)


def _to_base(value: float, unit: str) -> tuple[str, float]:
    if unit in _TEMPERATURE_UNITS:
        kelvin = {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]
        return "temperature", kelvin
    if unit in _LINEAR_UNITS:
        dimension, factor = _LINEAR_UNITS[unit]
        return dimension, value * factor
    known = [*_LINEAR_UNITS, *_TEMPERATURE_UNITS]
    raise ToolCallError(f"unknown unit {unit!r}.{did_you_mean(unit, known)} Known units: {', '.join(known)}")


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a value between units of length, mass, time or temperature.

    Args:
        value: The number to convert.
        from_unit: Its unit: mm, cm, m, km, inch, ft, mile, g, kg, lb, oz, s, min, h, day, C, F or K.
        to_unit: The unit to convert to (same dimension as from_unit).
    """
    dimension, base = _to_base(value, from_unit)
    target_dimension, one = _to_base(1.0, to_unit)
    if dimension != target_dimension:
        raise ToolCallError(f"cannot convert {dimension} ({from_unit}) to {target_dimension} ({to_unit})")
    if dimension == "temperature":
        result = {"C": base - 273.15, "F": (base - 273.15) * 9 / 5 + 32, "K": base}[to_unit]
    else:
        result = base / one
    return round(result, 6)


@lru_cache(maxsize=1)
def country_table() -> dict[str, dict[str, Any]]:
    """The bundled country table: name -> {capital, population_millions, area_km2, continent, currency}."""
    return json.loads(COUNTRIES_PATH.read_text(encoding="utf-8"))["countries"]


def lookup(country: str, field: str) -> str | float:
    """Look up a fact about a country in the bundled table.

    Args:
        country: Country name, e.g. "Kenya".
        field: One of capital, population_millions, area_km2, continent, currency.
    """
    table = country_table()
    by_lower = {name.lower(): name for name in table}
    name = by_lower.get(country.strip().lower())
    if name is None:
        raise ToolCallError(
            f"unknown country {country!r}.{did_you_mean(country, table)} Known: {', '.join(sorted(table))}"
        )
    row = table[name]
    if field not in row:
        raise ToolCallError(f"unknown field {field!r}.{did_you_mean(field, row)} Fields: {', '.join(row)}")
    return row[field]


TOOLS = (calculator, convert_units, lookup)
