"""Load a ``RunConfig`` from YAML plus dotted CLI overrides (``trainer.lr=1e-6``), reporting every problem at once.

Override values are parsed as YAML (``true``, ``3``, ``[a, b]``); floats such as ``1e-6`` parse as
numbers (PyYAML's YAML 1.1 resolver would leave them strings). Env ids and env kwargs are resolved
here too, so a config is fully checked before any model loads or container starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from agentrl.config.problems import Problem, ProblemsError, problems_from_errors, raise_problems
from agentrl.config.sections import EnvConfig
from agentrl.env.registry import env_config_problems
from agentrl.errors import ConfigError
from agentrl.job.run_config import RunConfig


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-6`` as a float (YAML 1.2 style)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """Parse YAML text; ConfigError with the line and column on a syntax error."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise ConfigError(f"{source} is not valid YAML{at}: {getattr(exc, 'problem', exc)}; fix the syntax") from exc


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path`` (ConfigError when missing, unreadable or not a mapping)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist; pass a YAML file such as configs/tiny_debug.yaml")
    data = parse_yaml(file.read_text(encoding="utf-8"), source=str(file))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(file)!r} must hold a mapping of sections (model:, env:, ...), got a "
            f"{type(data).__name__}"
        )
    return data


def apply_override(data: dict[str, Any], override: str, model: type[BaseModel] | None = RunConfig) -> Problem | None:
    """Apply one ``dotted.key=value`` override to ``data`` in place; returns a Problem instead of raising.

    A plug-in given by name alone (``algorithm.loss: grpo``) is opened into ``{kind: grpo}`` when an
    override sets one of its settings (``algorithm.loss.eps_low=0.1``).
    """
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        return Problem(override, "override is not of the form dotted.key=value", "write e.g. trainer.lr=1e-6")
    try:
        value = parse_yaml(raw, source=f"override {override!r}")
    except ConfigError as exc:
        return Problem(key, str(exc), "quote the value, e.g. key='text: with colon'")
    node = data
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if isinstance(child, str) and part in getattr(model, "plugin_fields", ()):
            child = node[part] = {"kind": child}
        if not isinstance(child, dict):
            prefix = ".".join(parts[: depth + 1])
            return Problem(
                key,
                f"{prefix} is {child!r}, not a section, so it has no key {parts[depth + 1]!r}",
                f"override {prefix}=... instead",
            )
        model = _section_model(model, part)
        node = child
    node[parts[-1]] = value
    return None


def _section_model(model: type[BaseModel] | None, name: str) -> type[BaseModel] | None:
    field = model.model_fields.get(name) if model is not None else None
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _validation_problems(exc: ValidationError, data: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    field_errors = []
    for error in exc.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, ProblemsError):
            problems.extend(cause.problems)
        else:
            field_errors.append(error)
    return problems_from_errors(field_errors, RunConfig, data=data) + problems


def build_config(
    data: dict[str, Any],
    *,
    check_env: bool = True,
    source: str = "config",
    problems: Sequence[Problem] = (),
    overrides: Sequence[str] = (),
) -> RunConfig:
    """Validate a config mapping; one ConfigError lists every problem.

    Earlier ``problems``, the env id and the env kwargs are included in that list; a problem with a key
    one of ``overrides`` set says so (the user looks on the command line, not in the file).
    """
    found = list(problems)
    config: RunConfig | None = None
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        found.extend(_validation_problems(exc, data))
    env_data = data.get("env")
    if check_env and isinstance(env_data, dict) and not any(p.key == "env" or p.key.startswith("env.") for p in found):
        found.extend(env_config_problems(EnvConfig.model_validate(env_data)))
    raise_problems(attribute_overrides(found, overrides), source=source)
    if config is None:  # unreachable: a failed validation always yields problems
        raise ConfigError(f"{source} is invalid")
    return config


def load_config(path: str | Path | None, overrides: Sequence[str] = (), *, check_env: bool = True) -> RunConfig:
    """Load ``path`` (or start empty when None), apply dotted overrides, validate everything at once.

    A problem with a key an override set is attributed to the command line, not to the file.
    """
    data = load_yaml(path) if path is not None else {}
    problems = [p for p in (apply_override(data, o) for o in overrides) if p is not None]
    source = f"config {str(path)!r}" if path is not None else "config"  # overrides' problems name themselves
    return build_config(data, check_env=check_env, source=source, problems=problems, overrides=overrides)


def attribute_overrides(problems: Sequence[Problem], overrides: Sequence[str]) -> list[Problem]:
    """``problems`` with those under a key an override set marked ``[set on the command line: KEY=VALUE]``."""
    keys = {o.partition("=")[0].strip(): o for o in overrides}
    out = []
    for problem in problems:
        origin = next(
            (o for k, o in keys.items() if problem.key == k or problem.key.startswith(f"{k}.") or problem.key == o),
            None,
        )
        where = f"[set on the command line: {origin}]" if origin else ""
        out.append(Problem(problem.key, problem.message, f"{problem.fix} {where}".strip()))
    return out
