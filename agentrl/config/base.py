"""The base of every config model: strict (unknown keys are errors) and documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that forbids unknown keys and validates on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @classmethod
    def unknown_key_hint(cls, key: str) -> str:
        """The fix for an unknown key that a spelling guess would miss (a section overrides it); '' for none."""
        return ""
