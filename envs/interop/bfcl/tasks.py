"""Which BFCL multi-turn entries a run uses: the categories, and the fixed train/test split by entry id.

BFCL numbers the entries of each category 0..199, and entry N of ``miss_func``, ``miss_param`` and
``long_context`` is a variant of the scenario of ``base`` N. The split goes by that number, the same in
every category, so no scenario is trained in one category and tested in another: **test** holds the
entries whose number is a multiple of 5 (0, 5, ..., 195: 40 per category), **train** the other 160.
"""

from __future__ import annotations

from typing import Literal

Category = Literal["base", "miss_func", "miss_param", "long_context"]
Split = Literal["train", "test", "all"]
CATEGORIES: tuple[Category, ...] = ("base", "miss_func", "miss_param", "long_context")
TEST_EVERY = 5


def bfcl_category(category: Category) -> str:
    """BFCL's name of a multi-turn category (``base`` -> ``multi_turn_base``)."""
    return f"multi_turn_{category}"


def entry_number(entry_id: str) -> int:
    """The number of an entry id (``multi_turn_base_17`` -> 17)."""
    return int(entry_id.rsplit("_", 1)[1])


def in_split(entry_id: str, split: Split) -> bool:
    """True when the entry belongs to ``split`` (test: numbers that are multiples of 5)."""
    if split == "all":
        return True
    return (entry_number(entry_id) % TEST_EVERY == 0) == (split == "test")
