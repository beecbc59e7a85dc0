"""The base of every config model: strict (unknown keys are errors) and documented."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown keys and validates on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    renamed_keys: ClassVar[dict[str, str]] = {}
    """A key this section no longer has -> the key that took its place: the unknown key's error names the new one."""

    @classmethod
    def unknown_key_hint(cls, key: str) -> str:
        """The fix for an unknown key: its new name when it was renamed, else nothing."""
        new = cls.renamed_keys.get(key)
        return f"renamed: write {new} instead of {key}." if new else ""
