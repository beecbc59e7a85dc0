"""Find environments by Gymnasium registry id (``agentrl/GuessNumber-v0``) or ``module:Class``.

agentrl never imports concrete env packages by name: they register themselves with Gymnasium
when imported (the bundled ``envs`` always, then the user's ``EnvConfig.import_modules``). Every
lookup failure names the value, a did-you-mean and the fix; env kwargs are checked against the env's ``config_model``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator
from pydantic import ValidationError

from agentrl.config.problems import Problem, problems_from_validation, raise_problems
from agentrl.config.sections import EnvConfig
from agentrl.env.base import MultiTurnEnv
from agentrl.errors import ConfigError, EnvNotFoundError, did_you_mean

BUNDLED_MODULES = ("envs",)  # imported before any env.import_modules: a user's modules add to these


@dataclass(frozen=True)
class EnvListing:
    """What ``agentrl envs`` shows about one registered multi-turn environment."""

    id: str
    entry_point: str
    summary: str
    max_turns: int
    tools: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ResolvedEnv:
    """An env reference resolved to its class (or factory), registry spec and default kwargs."""

    ref: str
    creator: Callable[..., Any]
    spec: EnvSpec | None = None

    @property
    def env_class(self) -> type[MultiTurnEnv] | None:
        """The MultiTurnEnv subclass, or None when the entry point is a plain factory function."""
        return self.creator if isinstance(self.creator, type) and issubclass(self.creator, MultiTurnEnv) else None


def register_env(env_id: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> None:
    """Register with Gymnasium unless ``env_id`` is already registered (modules may be re-imported)."""
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point, disable_env_checker=True, **kwargs)


def import_env_modules(modules: Sequence[str] = ()) -> None:
    """Import the bundled env modules, then ``modules`` (whose import registers environments); EnvNotFoundError
    names a bad one."""
    for name in dict.fromkeys([*BUNDLED_MODULES, *modules]):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise EnvNotFoundError(
                f"cannot import env module {name!r} (env.import_modules): {exc}. Run the agentrl command in the "
                "directory that holds it or add that directory to PYTHONPATH, install the package that provides it, "
                "or remove it from env.import_modules"
            ) from exc


def _multiturn_ids() -> list[str]:
    """Ids of the registered MultiTurnEnv classes. Loading a string entry point imports its module, which may
    register more envs: walk a snapshot of the registry, again, until a walk adds none."""
    seen: dict[str, bool] = {}
    while len(seen) < len(gym.registry):
        for env_id, spec in list(gym.registry.items()):
            if env_id not in seen:
                seen[env_id] = _spec_class(spec) is not None
    return [env_id for env_id, text_env in seen.items() if text_env]


def _spec_class(spec: EnvSpec) -> type[MultiTurnEnv] | None:
    entry = spec.entry_point
    if isinstance(entry, str):
        if entry.startswith("gymnasium.") or ":" not in entry:
            return None  # Gymnasium's own control/toy envs are never text envs; skip importing them
        try:
            entry = load_env_creator(entry)
        except (ImportError, AttributeError):
            return None
    return entry if isinstance(entry, type) and issubclass(entry, MultiTurnEnv) else None


def _resolve_class_path(ref: str) -> ResolvedEnv:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvNotFoundError(
            f"cannot import module {module_name!r} of env {ref!r}: {exc}. Check the module path (a 'module:Class' "
            f"string); the agentrl command imports from the working directory, so run it where {module_name}.py is, "
            "or add that directory to PYTHONPATH, or install the module"
        ) from exc
    target = getattr(module, attr, None)
    if target is None and attr in gym.registry:  # Gymnasium's own 'module:Env-v0' syntax
        return _resolve_registered(attr)
    if target is None:
        classes = [
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, MultiTurnEnv) and v is not MultiTurnEnv
        ]
        hint = did_you_mean(attr, classes) or (
            f" Env classes in {module_name}: {', '.join(sorted(classes))}." if classes else ""
        )
        raise EnvNotFoundError(f"module {module_name!r} has no attribute {attr!r} (env {ref!r}).{hint}")
    if isinstance(target, type) and not issubclass(target, MultiTurnEnv):
        raise ConfigError(
            f"env {ref!r} is the class {target.__name__}, which does not subclass agentrl.MultiTurnEnv; subclass it"
        )
    if not callable(target):
        raise ConfigError(
            f"env {ref!r} is a {type(target).__name__}, not a MultiTurnEnv subclass; point env.id at a class"
        )
    return ResolvedEnv(ref=ref, creator=target)


def _resolve_registered(env_id: str) -> ResolvedEnv:
    if env_id not in gym.registry:
        candidates = _multiturn_ids()
        hint = did_you_mean(env_id, candidates) or did_you_mean(env_id, gym.registry)
        known = ", ".join(sorted(candidates)) or "none"
        raise EnvNotFoundError(
            f"unknown environment id {env_id!r}.{hint} Registered agentrl environments: {known}. "
            "Run `agentrl envs` to list them, add the module that registers it to env.import_modules, "
            "or use a 'module:Class' string"
        )
    spec = gym.registry[env_id]
    try:
        creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    except (ImportError, AttributeError) as exc:
        raise EnvNotFoundError(
            f"environment {env_id!r} is registered with entry point {spec.entry_point!r}, which cannot be loaded: "
            f"{exc}; fix the entry point or the module it names"
        ) from exc
    return ResolvedEnv(ref=env_id, creator=creator, spec=spec)


def resolve_env(env_id: str, import_modules: Sequence[str] = ()) -> ResolvedEnv:
    """Resolve a registry id or ``module:Class`` (importing ``import_modules`` first)."""
    import_env_modules(import_modules)
    if ":" in env_id and "/" not in env_id.split(":", 1)[0]:
        return _resolve_class_path(env_id)
    return _resolve_registered(env_id)


def env_kwargs_problems(resolved: ResolvedEnv, kwargs: dict[str, Any], prefix: str = "env.kwargs") -> list[Problem]:
    """Problems of ``kwargs`` against the env's ``config_model`` ([] when it has none or they fit)."""
    config_model = getattr(resolved.env_class, "config_model", None)
    if config_model is None:
        return []
    merged = {**(resolved.spec.kwargs if resolved.spec else {}), **kwargs}
    try:
        config_model.model_validate(merged)
    except ValidationError as exc:
        return problems_from_validation(exc, config_model, prefix)
    return []


def env_config_problems(env_cfg: EnvConfig) -> list[Problem]:
    """Every problem of an env config (unknown id, bad module, bad kwargs), without creating an env."""
    try:
        import_env_modules(env_cfg.import_modules)
    except EnvNotFoundError as exc:
        return [Problem("env.import_modules", str(exc))]
    try:
        resolved = resolve_env(env_cfg.id, import_modules=())
    except (EnvNotFoundError, ConfigError) as exc:
        return [Problem("env.id", str(exc))]
    return env_kwargs_problems(resolved, env_cfg.kwargs)


def _build(resolved: ResolvedEnv, kwargs: dict[str, Any]) -> MultiTurnEnv:
    if resolved.spec is not None:
        env = gym.make(resolved.spec, disable_env_checker=True, **kwargs).unwrapped
    else:
        env = resolved.creator(**kwargs)
    if not isinstance(env, MultiTurnEnv):
        raise ConfigError(
            f"env {resolved.ref!r} created a {type(env).__name__}, not an agentrl.MultiTurnEnv; subclass MultiTurnEnv"
        )
    return env


def make_env_factory(env_cfg: EnvConfig) -> Callable[[], MultiTurnEnv]:
    """Resolve and validate ``env_cfg`` now; return a cheap factory creating a fresh (unwrapped) env."""
    resolved = resolve_env(env_cfg.id, env_cfg.import_modules)
    raise_problems(env_kwargs_problems(resolved, env_cfg.kwargs), source=f"env {env_cfg.id!r}")
    return partial(_build, resolved, dict(env_cfg.kwargs))


def make_env(env_id: str, **kwargs: Any) -> MultiTurnEnv:
    """Create one env by id or ``module:Class`` with kwargs (validated like a config)."""
    return make_env_factory(EnvConfig(id=env_id, kwargs=kwargs))()


def _tool_names(tools: Sequence[Any]) -> tuple[str, ...]:
    return tuple(getattr(t, "name", getattr(t, "__name__", str(t))) for t in tools)


def _listing(env_id: str, spec: EnvSpec, cls: type[MultiTurnEnv]) -> EnvListing:
    """What one env is with its registered default kwargs: an env may set max_turns/tools from its config.

    An env that needs kwargs (a server URL, a task file) cannot be built bare: its config model's
    defaults are shown, with one line saying which kwargs it needs. The tool schemas are built as a
    run builds them, so a tool no schema describes shows here, not after a model has loaded.
    """
    doc = (cls.__doc__ or "").strip().splitlines()
    summary = doc[0] if doc else ""
    entry = spec.entry_point if isinstance(spec.entry_point, str) else f"{cls.__module__}:{cls.__qualname__}"
    max_turns, tools = _config_default(cls, "max_turns", cls.max_turns), _tool_names(cls.tools)
    try:  # constructing an env is cheap by contract (resources start on first use)
        env = _build(ResolvedEnv(ref=env_id, creator=cls, spec=spec), {})
    except Exception as exc:  # noqa: BLE001 - a listing shows the class defaults and says why, never fails
        summary = f"{summary} (defaults shown; {_why_unbuilt(exc)})"
    else:
        try:
            max_turns, tools = env.max_turns, _tool_names(env.tools)
            env.tool_schemas()
        except ConfigError as exc:  # a tool whose parameter no JSON schema describes
            summary = f"{summary} (tool error: {exc})"
        finally:
            env.close()
    return EnvListing(id=env_id, entry_point=entry, summary=summary, max_turns=max_turns, tools=tools)


def _config_default(cls: type[MultiTurnEnv], name: str, fallback: int) -> int:
    """The default of ``name`` in the env's config model (an env that sets max_turns from its config), else
    ``fallback`` (the class attribute)."""
    model = getattr(cls, "config_model", None)
    field = model.model_fields.get(name) if model is not None else None
    default = field.default if field is not None else None
    return default if isinstance(default, int) and not isinstance(default, bool) else fallback


def _why_unbuilt(exc: Exception) -> str:
    """One line for a table cell: the kwargs a ValidationError asks for, else the error's first line."""
    if isinstance(exc, ValidationError):
        missing = [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "missing"]
        other = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors() if e["type"] != "missing"]
        parts = ([f"needs env.kwargs {', '.join(missing)}"] if missing else []) + other
        return "; ".join(parts)
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"constructing it failed: {type(exc).__name__}: {first}".rstrip(": ")


def list_envs(import_modules: Sequence[str] = ()) -> list[EnvListing]:
    """The registered multi-turn environments, sorted by id, as built with their default kwargs."""
    import_env_modules(import_modules)
    listings = []
    for env_id in sorted(_multiturn_ids()):
        spec = gym.registry[env_id]
        cls = _spec_class(spec)
        if cls is not None:  # always, for ids from _multiturn_ids; keeps the type checker honest
            listings.append(_listing(env_id, spec, cls))
    return listings
