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

from agentrl.config.foreign_names import foreign_key_hint
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


def _submodel(model: type[BaseModel] | None, name: str | int, value: Any = _MISSING) -> type[BaseModel] | None:
    """The model of field ``name``; for a plug-in field (``plugin_model``), the class its raw ``value`` selects."""
    if model is None or not isinstance(name, str) or name not in model.model_fields:
        return None
    plugin_model = getattr(model, "plugin_model", None)
    chosen = plugin_model(name, value) if plugin_model is not None and value is not _MISSING else None
    if chosen is not None:
        return chosen
    annotation = model.model_fields[name].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _walk(
    model: type[BaseModel] | None, loc: Sequence[str | int], data: Any = _MISSING
) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """The model owning the last element of ``loc`` and the model of that element (if any).

    ``data`` (the raw config) lets plug-in fields resolve to the settings class their name selects.
    """
    parent = model
    node = data
    for part in loc[:-1]:
        node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        parent = _submodel(parent, part, node)
    if not loc:
        return parent, model
    last = node.get(loc[-1], _MISSING) if isinstance(node, dict) else _MISSING
    return parent, _submodel(parent, loc[-1], last)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _one_problem(error: dict[str, Any], model: type[BaseModel] | None, prefix: str, data: Any) -> Problem:
    loc = [part for part in error["loc"]]
    key = ".".join([prefix, *map(str, loc)] if prefix else map(str, loc))
    ctx = error.get("ctx") or {}
    if "message" in ctx and "fix" in ctx:  # our own PydanticCustomError: message and fix already written
        return Problem(key, str(ctx["message"]), str(ctx["fix"]))
    owner, _ = _walk(model, loc, data)
    value = error.get("input", _MISSING)
    if error["type"] == "extra_forbidden":
        known = sorted(owner.model_fields) if owner is not None else []
        hint_of = getattr(owner, "unknown_key_hint", None)
        ours = owner is None or owner.__module__.startswith("agentrl.")  # not an env's own kwargs model
        hint = (hint_of(str(loc[-1])) if callable(hint_of) else "") or (foreign_key_hint(str(loc[-1])) if ours else "")
        hint = hint or did_you_mean(str(loc[-1]), known).strip()
        sep = " " if not hint or hint.endswith((".", "?")) else ". "
        fix = f"{hint}{sep}Known keys here: {', '.join(known)}" if known else "remove it"
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
    message = str(error["msg"]).removeprefix("Value error, ")
    return Problem(key, f"{message}{shown}", fix)


def problems_from_errors(
    errors: Sequence[dict[str, Any]], model: type[BaseModel] | None = None, prefix: str = "", data: Any = _MISSING
) -> list[Problem]:
    """One ``Problem`` per pydantic error dict (``ValidationError.errors()``), keyed by dotted path.

    ``data``, the validated mapping, lets errors inside a plug-in's settings name that plug-in's keys.
    """
    return [_one_problem(error, model, prefix, data) for error in errors]


def problems_from_validation(
    exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> list[Problem]:
    """One ``Problem`` per pydantic error, keyed by dotted path (``prefix`` prepended)."""
    return problems_from_errors(exc.errors(), model, prefix)


class ProblemsError(ValueError):
    """Raised inside pydantic validation with structured problems; ``agentrl.job.loader`` reports each."""

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
