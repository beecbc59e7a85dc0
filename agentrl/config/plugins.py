"""Named plug-ins chosen in a config (a policy loss, an advantage scheme): one registry per plug-in point.

A plug-in is a pydantic model whose fields are its settings and whose ``kind`` field (a ``Literal``
with a default) is the name a config uses; ``PluginRegistry.register`` adds the class, and the
config resolves ``loss: gspo_token`` or ``loss: {kind: grpo, eps_low: 0.2}`` through the registry,
so the allowed names are whatever is registered when the config is validated. Torch-free, so
configs load without importing the trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import Field
from pydantic_core import PydanticCustomError

from agentrl.config.base import StrictModel
from agentrl.errors import ConfigError, did_you_mean


class PluginSettings(StrictModel):
    """Base of a named plug-in: its fields are its settings; ``kind`` (a Literal with a default) selects it."""

    kind: str = Field(description="The registered name that selects this plug-in (the tag of every tagged union).")

    unknown_key_hints: ClassVar[dict[str, str]] = {}
    """Why a key some other plug-in accepts is not a setting of this one (shown as the fix of an unknown key)."""

    @classmethod
    def unknown_key_hint(cls, key: str) -> str:
        """The fix for an unknown settings key: this class's own hint, else which registered plug-ins take it."""
        if key in cls.unknown_key_hints:
            return cls.unknown_key_hints[key]
        for registry in _REGISTRIES:
            if issubclass(cls, registry.base):
                owners = [n for n in registry.names() if key in registry.get(n).model_fields and key != "kind"]
                if owners:
                    return f"{key} is a setting of {', '.join(owners)}, not of {cls.model_fields['kind'].default}."
        return ""


P = TypeVar("P", bound=PluginSettings)


def refuse_name_tag(value: Mapping[str, Any], label: str) -> None:
    """A mapping tagged ``name:`` (how many configs elsewhere pick a plug-in) is told that ``kind`` is the tag here."""
    if "name" in value and "kind" not in value:
        raise PydanticCustomError(
            "renamed_tag",
            "{message}",
            {
                "message": f"a {label} is chosen by 'kind', not 'name'",
                "fix": f"write kind: {value['name']} instead of name: {value['name']}",
            },
        )


_REGISTRIES: list[PluginRegistry[Any]] = []


def _declared_name(cls: type[PluginSettings]) -> str:
    if "name" in cls.model_fields:  # one tag word for every union, so a config never guesses which one
        raise ConfigError(
            f"{cls.__name__} declares a 'name' field; a plug-in is tagged by 'kind': write "
            f"kind: Literal[{cls.model_fields['name'].default!r}] = {cls.model_fields['name'].default!r}"
        )
    field = cls.model_fields.get("kind")
    default = field.default if field is not None else None
    if not isinstance(default, str) or not default:
        raise ConfigError(f"{cls.__name__} declares no name; give it a field like kind: Literal['my_loss'] = 'my_loss'")
    return default


class PluginRegistry(Generic[P]):
    """Name -> plug-in class for one plug-in point; lookups fail with the registered names and a did-you-mean."""

    def __init__(self, label: str, key: str, base: type[P], register_with: str) -> None:
        self.label = label  # "policy loss"
        self.key = key  # "algorithm.loss"
        self.base = base
        self.register_with = register_with  # "agentrl.algos.register_loss"
        self._classes: dict[str, type[P]] = {}
        _REGISTRIES.append(self)

    def register(self, cls: type[P]) -> type[P]:
        """Add ``cls`` under its declared name (a re-imported module may register its class again); returns ``cls``."""
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise ConfigError(f"cannot register {cls!r} as a {self.label}: subclass {self.base.__name__}")
        name = _declared_name(cls)
        known = self._classes.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ConfigError(
                f"{self.label} {name!r} is already registered by {known.__module__}.{known.__qualname__}; "
                "give yours another name"
            )
        self._classes[name] = cls
        return cls

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._classes)

    def get(self, name: str) -> type[P]:
        """The class registered as ``name``; ConfigError with did-you-mean when there is none."""
        cls = self._classes.get(name)
        if cls is None:
            raise ConfigError(self.unknown_message(name))
        return cls

    def unknown_message(self, name: object, *, with_key: bool = True) -> str:
        """'unknown policy loss 'x' (algorithm.loss). Did you mean 'y'? Registered: ...' (short without the key)."""
        hint = did_you_mean(str(name), self._classes)
        if not with_key:
            return f"unknown {self.label} {name!r}.{hint}"
        return f"unknown {self.label} {name!r} ({self.key}).{hint} Registered: {', '.join(self.names())}"

    def unknown_fix(self) -> str:
        """How to fix an unknown name."""
        return f"choose one of {', '.join(self.names())}, or register yours with {self.register_with}"

    def resolve(self, value: Any, default: str | None = None) -> P:
        """A validated plug-in from ``'name'``, ``{'name': ..., **settings}`` or an instance (pydantic validator use).

        A mapping without a name takes ``default``. Unknown names raise a ``PydanticCustomError`` so the
        config reports them under this plug-in's key with the registered names; invalid settings raise
        the plug-in's own validation errors.
        """
        if isinstance(value, self.base):
            return value
        data: Mapping[str, Any]
        if isinstance(value, str):
            data = {"kind": value}
        elif isinstance(value, Mapping):
            refuse_name_tag(value, self.label)
            data = value if "kind" in value or default is None else {"kind": default, **value}
        else:
            raise PydanticCustomError(
                "plugin_type",
                "{message}",
                {"message": f"expected a {self.label} name or a mapping with its kind, got {value!r}", "fix": ""},
            )
        name = data.get("kind")
        if name not in self._classes:
            raise PydanticCustomError(
                "unknown_plugin",
                "{message}",
                {"message": self.unknown_message(name, with_key=False), "fix": self.unknown_fix()},
            )
        return self._classes[name].model_validate(dict(data))

    def settings_model(self, value: Any, default: str | None = None) -> type[P] | None:
        """The class a raw config value selects (for error messages), or None."""
        name = value if isinstance(value, str) else value.get("kind", default) if isinstance(value, Mapping) else None
        return self._classes.get(name) if isinstance(name, str) else None
