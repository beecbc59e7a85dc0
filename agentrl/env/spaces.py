"""Gymnasium spaces for text environments.

``gymnasium.spaces.Text`` rejects characters outside its charset (``"é"`` fails), so agentrl uses
its own spaces: ``UnicodeText`` accepts any ``str`` and ``MessageList`` any list of chat messages.
Both define ``__eq__`` and ``__hash__`` (vector envs compare the spaces of their sub-envs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Space

# Sampling draws from a mixed alphabet on purpose: env checkers then exercise non-ASCII input.
_SAMPLE_ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?éßü漢字🙂\n")

ROLES = ("system", "user", "assistant", "tool")


class UnicodeText(Space[str]):
    """Any Unicode string of ``min_length`` to ``max_length`` characters (no charset restriction)."""

    def __init__(
        self, max_length: int = 1_000_000, *, min_length: int = 0, seed: int | np.random.Generator | None = None
    ) -> None:
        if not 0 <= min_length <= max_length:
            raise ValueError(
                f"UnicodeText needs 0 <= min_length <= max_length, got min_length={min_length}, max_length={max_length}"
            )
        self.min_length = min_length
        self.max_length = max_length
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string (lengths capped at 32 so samples stay cheap)."""
        high = min(self.max_length, max(self.min_length, 32))
        length = int(self.np_random.integers(self.min_length, high + 1))
        return "".join(self.np_random.choice(_SAMPLE_ALPHABET, size=length).tolist())

    def contains(self, x: Any) -> bool:
        """True for a ``str`` whose length is within bounds."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        """Text has no fixed-size numpy form."""
        return False

    def to_jsonable(self, sample_n: Sequence[str]) -> list[str]:
        """Strings are already JSON-able."""
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        """Inverse of ``to_jsonable``."""
        return list(sample_n)

    def __repr__(self) -> str:
        return f"UnicodeText(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and (other.min_length, other.max_length) == (
            self.min_length,
            self.max_length,
        )

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.min_length, self.max_length))


class MessageList(Space[list]):
    """A list of chat messages: dicts with a known string ``role`` and string ``content`` (extra keys allowed)."""

    ROLES = ROLES

    def __init__(self, max_messages: int = 10_000, seed: int | np.random.Generator | None = None) -> None:
        self.max_messages = max_messages
        self._text = UnicodeText()
        super().__init__(dtype=object, seed=seed)

    def seed(self, seed: int | None = None) -> list[int]:
        """Seed this space and its inner text space (so samples are reproducible)."""
        seeds = super().seed(seed)
        self._text.seed(int(self.np_random.integers(2**31)))
        return seeds

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        """Zero to two random user messages."""
        count = int(self.np_random.integers(0, min(3, self.max_messages + 1)))
        return [{"role": "user", "content": self._text.sample()} for _ in range(count)]

    def contains(self, x: Any) -> bool:
        """True for a list of well-formed chat messages."""
        if not isinstance(x, list) or len(x) > self.max_messages:
            return False
        return all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in x)

    @property
    def is_np_flattenable(self) -> bool:
        """Messages have no fixed-size numpy form."""
        return False

    def to_jsonable(self, sample_n: Sequence[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Messages are plain dicts of strings: copy them."""
        return [[dict(m) for m in sample] for sample in sample_n]

    def from_jsonable(self, sample_n: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Inverse of ``to_jsonable``."""
        return [[dict(m) for m in sample] for sample in sample_n]

    def __repr__(self) -> str:
        return f"MessageList(max_messages={self.max_messages})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageList) and other.max_messages == self.max_messages

    def __hash__(self) -> int:
        return hash(("MessageList", self.max_messages))
