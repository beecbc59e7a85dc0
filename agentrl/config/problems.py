"""Config problems: each names a dotted key, the offending value and the fix; reported together.

``problems_from_validation`` turns a pydantic ``ValidationError`` into problems (with did-you-mean
for misspelt keys and the field's documentation as the fix); ``raise_problems`` raises one
``ConfigError`` listing all of them. A validator that finds its own problems raises ``ProblemsError``,
which the loader unpacks, so they keep their dotted keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from agentrl.errors import ConfigError, did_you_mean

_MISSING = object()


@dataclass(frozen=True)
class Problem:
    """One invalid config entry: dotted ``key``, what is wrong, and how to fix it."""

    key: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        fix = f" -> {self.fix}" if self.fix else ""
        return f"  {self.key or '(top level)'}: {self.message}{fix}"


def _submodel(model: type[BaseModel] | None, name: str | int) -> type[BaseModel] | None:
    if model is None or not isinstance(name, str) or name not in model.model_fields:
        return None
    annotation = model.model_fields[name].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _walk(
    model: type[BaseModel] | None, loc: Sequence[str | int]
) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """The model owning the last element of ``loc`` and the model of that element (if any)."""
    parent = model
    for part in loc[:-1]:
        parent = _submodel(parent, part)
    return parent, _submodel(parent, loc[-1]) if loc else model


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _one_problem(error: dict[str, Any], model: type[BaseModel] | None, prefix: str) -> Problem:
    loc = [part for part in error["loc"]]
    key = ".".join([prefix, *map(str, loc)] if prefix else map(str, loc))
    owner, _ = _walk(model, loc)
    value = error.get("input", _MISSING)
    if error["type"] == "extra_forbidden":
        known = sorted(owner.model_fields) if owner is not None else []
        hint = did_you_mean(str(loc[-1]), known).strip()
        fix = f"{hint} Known keys here: {', '.join(known)}" if known else "remove it"
        shown = f" (value {_describe(value)})" if value is not _MISSING else ""
        return Problem(key, f"unknown key{shown}", fix.strip())
    if error["type"] == "missing":
        field = owner.model_fields.get(str(loc[-1])) if owner is not None else None
        doc = field.description if field is not None and field.description else ""
        return Problem(key, "required key is missing", f"set it{': ' + doc if doc else ''}")
    field = owner.model_fields.get(str(loc[-1])) if owner is not None and loc else None
    doc = field.description if field is not None and field.description else ""
    shown = f" (got {_describe(value)})" if value is not _MISSING else ""
    fix = f"set a valid value; {key.rsplit('.', 1)[-1]} is: {doc}" if doc else "set a valid value"
    return Problem(key, f"{error['msg']}{shown}", fix)


def problems_from_errors(
    errors: Sequence[dict[str, Any]], model: type[BaseModel] | None = None, prefix: str = ""
) -> list[Problem]:
    """One ``Problem`` per pydantic error dict (``ValidationError.errors()``), keyed by dotted path."""
    return [_one_problem(error, model, prefix) for error in errors]


def problems_from_validation(
    exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> list[Problem]:
    """One ``Problem`` per pydantic error, keyed by dotted path (``prefix`` prepended)."""
    return problems_from_errors(exc.errors(), model, prefix)


class ProblemsError(ValueError):
    """Raised inside pydantic validation with structured problems; ``agentrl.config.loader`` reports each."""

    def __init__(self, problems: Sequence[Problem], source: str = "config") -> None:
        self.problems = list(problems)
        super().__init__(format_problems(self.problems, source=source))


def format_problems(problems: Sequence[Problem], source: str = "config") -> str:
    """The multi-line message of a ConfigError listing every problem."""
    count = len(problems)
    header = f"{source} has {count} problem{'s' if count != 1 else ''}:"
    return "\n".join([header, *map(str, problems)])


def raise_problems(problems: Sequence[Problem], source: str = "config") -> None:
    """Raise one ConfigError listing all problems (no-op when there are none)."""
    if problems:
        raise ConfigError(format_problems(problems, source))
