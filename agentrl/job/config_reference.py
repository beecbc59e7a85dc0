"""The config reference page (docs/config-reference.md), generated from the pydantic models of ``RunConfig``.

Every key with its type, default and description, section by section; a section chosen by a tag (an engine
backend, a policy loss, an advantage scheme, an importance correction) lists each registered variant's own
keys. The tag is whichever field the variant declares as a one-value ``Literal``, so renaming keys needs no
change here: ``scripts/config_reference.py`` rewrites the page and a test checks it is current.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agentrl.algos.loss_base import LOSSES
from agentrl.algos.scheme_base import SCHEMES
from agentrl.config.plugins import PluginSettings
from agentrl.engines.config import EngineConfig
from agentrl.engines.registry import engine_config_class, engine_kinds
from agentrl.job.run_config import RunConfig

HEADER = """# Config reference

Every key of a run config (`agentrl train CONFIG`, `agentrl eval`, `agentrl rollout`), generated from the
pydantic models by `python scripts/config_reference.py` (a test checks this page is current). Set a key in the
YAML file or on the command line as a dotted override (`trainer.lr=1e-6`). Sections chosen by a tag list each
registered variant's keys. Coming from TRL or verl: an unknown key with a name those use (`learning_rate`,
`num_generations`, ...) is answered with ours.
"""


def _tag(model: type[BaseModel]) -> tuple[str, str] | None:
    """(field, value) of the one-value Literal that selects ``model`` among its siblings."""
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else ()
        if len(args) == 1 and field.default == args[0]:
            return name, str(args[0])
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes a (possibly optional or annotated) union names."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def _variants(key: str, field: FieldInfo) -> list[type[BaseModel]]:
    """The models a section may be: the registered engines or plug-ins, a union's members, or its one model."""
    models = _models_in(field.annotation)
    if len(models) == 1 and issubclass(models[0], EngineConfig):
        return [engine_config_class(kind) for kind in engine_kinds()]
    if len(models) == 1 and issubclass(models[0], PluginSettings):
        registry = next((r for r in (LOSSES, SCHEMES) if r.key == key), None)
        return [registry.get(name) for name in registry.names()] if registry is not None else models
    return models


def type_name(annotation: Any) -> str:
    """A short readable type: ``int``, ``float | None``, ``'sync' | 'async'``, ``list[str]``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        tag = _tag(type(value))
        return f"{tag[0]}: {tag[1]}" if tag else "its defaults"
    return f"`{value!r}`" if not isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section(key: str, model: type[BaseModel], title: str, out: list[str]) -> None:
    rows: list[str] = []
    nested: list[tuple[str, type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        dotted = f"{key}.{name}" if key else name
        variants = _variants(dotted, field)
        kind = type_name(field.annotation)
        tags = [tag for tag in map(_tag, variants) if tag is not None]
        if len(tags) > 1 or (variants and issubclass(variants[0], PluginSettings)):
            kind = f"a mapping by {tags[0][0]}: " + ", ".join(value for _, value in tags)
            kind += " (or the name alone)" if issubclass(variants[0], PluginSettings) else ""
            kind += " | None" if type(None) in typing.get_args(field.annotation) else ""
        for variant in variants:
            tag = _tag(variant) if len(tags) > 1 or issubclass(variant, PluginSettings) else None
            nested.append((dotted, variant, f"{dotted} ({tag[0]}: {tag[1]})" if tag else dotted))
        doc = _cell(field.description or "")
        if key or not variants:  # at the top level a section has its own table; a plain key (seed) goes here
            rows.append(f"| `{dotted}` | {_cell(kind)} | {_cell(_default(field))} | {doc} |")
    if not key and rows:
        out += ["## Top-level keys", "", "| key | type | default | description |", "|---|---|---|---|", *rows, ""]
    if key:
        doc = _cell((model.__doc__ or "").strip().split("\n\n")[0])
        out += [f"## {title}", "", doc, "", "| key | type | default | description |", "|---|---|---|---|", *rows, ""]
    for dotted, variant, sub_title in nested:
        _section(dotted, variant, sub_title, out)


def config_reference() -> str:
    """The whole page, as ``scripts/config_reference.py`` writes it."""
    out = [HEADER]
    _section("", RunConfig, "", out)
    return "\n".join(out).rstrip("\n") + "\n"
