"""The registry of engine backends: ``engine.kind`` -> the backend's config model (an ``EngineConfig``).

How a backend registered by a user's module joins the run config: the ``engine`` section is typed
as the base ``EngineConfig`` and validated by ``parse_engine_config``, which imports
``engine.import_modules``, looks ``kind`` up here *at validation time* and validates the section
against that backend's model. A static discriminated union (or a TypeAdapter rebuilt at each
registration) would have to be rebuilt, with every model embedding it, whenever a module registers a
backend, and pydantic's union errors put the tag in the key (``engine.sglang.urls``) and carry no
did-you-mean. Dispatching here keeps every key ``engine.<field>``, gives an unknown kind a
did-you-mean over the registered kinds, and names the backend a misplaced field belongs to.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from agentrl.config.problems import Problem, ProblemsError, problems_from_errors
from agentrl.engines.config import EngineConfig
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.errors import ConfigError, did_you_mean

DEFAULT_KIND = "embedded"
_BACKENDS: dict[str, type[EngineConfig]] = {}


def register_engine(config_cls: type[EngineConfig]) -> type[EngineConfig]:
    """Make ``config_cls`` (an ``EngineConfig`` subclass whose ``kind`` is a one-value Literal) selectable
    as ``engine.kind``; returns it, so it also works as a class decorator."""
    if not (isinstance(config_cls, type) and issubclass(config_cls, EngineConfig)):
        raise ConfigError(f"register_engine takes an EngineConfig subclass, got {config_cls!r}")
    kind = config_cls.model_fields["kind"].default
    if not isinstance(kind, str) or not kind:
        raise ConfigError(
            f"{config_cls.__qualname__}.kind needs a default naming the backend, e.g. "
            'kind: Literal["my_engine"] = Field("my_engine", description=...)'
        )
    known = _BACKENDS.get(kind)
    if known is not None and _qualified(known) != _qualified(config_cls):  # re-imports replace themselves
        raise ConfigError(
            f"engine kind {kind!r} is registered by {_qualified(known)}; give {_qualified(config_cls)} another kind"
        )
    _BACKENDS[kind] = config_cls
    return config_cls


def engine_kinds() -> list[str]:
    """The registered kinds, sorted."""
    return sorted(_BACKENDS)


def engine_config_class(kind: str) -> type[EngineConfig]:
    """The config model registered for ``kind`` (ConfigError with a did-you-mean otherwise)."""
    if kind not in _BACKENDS:
        problem = _unknown_kind(kind)
        raise ConfigError(f"{problem.message}; {problem.fix}")
    return _BACKENDS[kind]


def default_engine_config() -> EngineConfig:
    """The engine section of a config that has none."""
    return _BACKENDS[DEFAULT_KIND]()


def engine_takes_seed(data: Mapping[str, Any]) -> bool:
    """Whether the backend an ``engine`` mapping names (the default one when it names none) has a ``seed``."""
    config_cls = _BACKENDS.get(data.get("kind", DEFAULT_KIND))
    return config_cls is not None and "seed" in config_cls.model_fields


def parse_engine_config(value: Any) -> EngineConfig:
    """Validate an ``engine`` section (a mapping, or a config object kept as is) against its backend's model.

    Raises ``ProblemsError`` listing every problem with its dotted key (``engine.kind``, ``engine.urls``).
    """
    if isinstance(value, EngineConfig):
        return value
    if not isinstance(value, Mapping):
        problem = Problem(
            "engine", f"must be a mapping of engine settings, got {value!r}", "write e.g. engine: {kind: embedded}"
        )
        raise ProblemsError([problem])
    modules = value.get("import_modules") or []
    problems = _import_modules(modules) if isinstance(modules, (list, tuple)) else []  # else: pydantic says so
    kind = value.get("kind", DEFAULT_KIND)
    config_cls = _BACKENDS.get(kind) if isinstance(kind, str) else None
    if config_cls is None:
        raise ProblemsError([*problems, _unknown_kind(kind)])
    # another backend's field set to null (e.g. engine.max_batch_size=null on the command line) means "unset"
    data = {k: v for k, v in value.items() if not (v is None and k not in config_cls.model_fields and _owners(k))}
    try:
        config = config_cls.model_validate(data)
    except ValidationError as exc:
        raise ProblemsError([*problems, *_section_problems(exc, config_cls, kind)]) from None
    if problems:
        raise ProblemsError(problems)
    return config


def _unknown_kind(kind: object) -> Problem:
    kinds = engine_kinds()
    hint = did_you_mean(kind, kinds).strip() if isinstance(kind, str) else ""
    return Problem(
        "engine.kind",
        f"unknown engine kind {kind!r}",
        f"{hint + ' ' if hint else ''}Registered kinds: {', '.join(kinds)}. A backend of your own registers with "
        "agentrl.engines.register_engine (list its module in engine.import_modules)",
    )


def _section_problems(exc: ValidationError, config_cls: type[EngineConfig], kind: str) -> list[Problem]:
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        nested = (error.get("ctx") or {}).get("error")
        if isinstance(nested, ProblemsError):  # a nested engine section (a wrapping backend's inner one)
            where = ".".join(["engine", *map(str, error["loc"])])
            problems.extend(Problem(where + p.key.removeprefix("engine"), p.message, p.fix) for p in nested.problems)
            continue
        owners = _owners(field) if error["type"] == "extra_forbidden" else []
        if owners:
            problems.append(
                Problem(
                    f"engine.{field}",
                    f"is a setting of engine.kind {' / '.join(map(repr, owners))}, not of {kind!r}",
                    f"remove it (on the command line: engine.{field}=null) or set engine.kind: {owners[0]}",
                )
            )
            continue
        (problem,) = problems_from_errors([error], config_cls, prefix="engine")
        if error["type"] == "extra_forbidden" and not did_you_mean(field, config_cls.model_fields):
            problem = Problem(problem.key, problem.message, f"{_other_backend_hint(field, kind)}{problem.fix}")
        problems.append(problem)
    return problems


def _other_backend_hint(field: str, kind: str) -> str:
    """'Did you mean ... (a setting of engine.kind ...)? ' for a misspelt field of another backend, else ''."""
    elsewhere: dict[str, list[str]] = {}
    for other, cls in sorted(_BACKENDS.items()):
        for name in cls.model_fields if other != kind else ():
            elsewhere.setdefault(name, []).append(other)
    guess = difflib.get_close_matches(field, list(elsewhere), n=1, cutoff=0.5)
    if not guess:
        return ""
    return f"Did you mean {guess[0]!r} (a setting of engine.kind {' / '.join(map(repr, elsewhere[guess[0]]))})? "


def _owners(field: str) -> list[str]:
    """The registered kinds that have a field named ``field``."""
    return [kind for kind, cls in sorted(_BACKENDS.items()) if field in cls.model_fields]


def _import_modules(modules: Sequence[Any]) -> list[Problem]:
    problems = []
    for name in modules:
        try:
            importlib.import_module(str(name))
        except ImportError as exc:
            problems.append(
                Problem(
                    "engine.import_modules",
                    f"cannot import {name!r}: {exc}",
                    "install the package that provides it, or put its directory on PYTHONPATH (PYTHONPATH=. for a "
                    "module in the working directory)",
                )
            )
    return problems


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


register_engine(EmbeddedEngineConfig)
register_engine(SGLangEngineConfig)
register_engine(VLLMEngineConfig)
