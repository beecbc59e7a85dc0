"""Gymnasium spaces for text environments.

``gymnasium.spaces.Text`` rejects characters outside its charset (``"é"`` fails), so agentrl uses
its own spaces: ``UnicodeText`` accepts any ``str`` and ``MessageList`` any list of chat messages.
Both define ``__eq__`` (vector envs compare spaces).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?éßü漢字🙂\n")


class UnicodeText(Space[str]):
    """Any Unicode string up to ``max_length`` characters."""

    def __init__(self, max_length: int = 1_000_000, seed: int | np.random.Generator | None = None) -> None:
        self.max_length = max_length
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, 32))
        return "".join(self.np_random.choice(_SAMPLE_ALPHABET, size=length).tolist())

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.max_length))


class MessageList(Space[list]):
    """A list of chat messages: dicts with string ``role`` and ``content`` (extra keys allowed)."""

    ROLES = ("system", "user", "assistant", "tool")

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        self._text = UnicodeText()
        super().__init__(dtype=object, seed=seed)

    def seed(self, seed: int | None = None) -> list[int]:
        seeds = super().seed(seed)
        self._text.seed(int(self.np_random.integers(2**31)))
        return seeds

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        count = int(self.np_random.integers(0, 3))
        return [{"role": "user", "content": self._text.sample()} for _ in range(count)]

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list):
            return False
        return all(
            isinstance(m, dict) and m.get("role") in self.ROLES and isinstance(m.get("content"), str)
            for m in x
        )

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MessageList()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageList)

    def __hash__(self) -> int:
        return hash("MessageList")
