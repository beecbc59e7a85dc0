"""Which SGLang server gets a request: sticky by prompt prefix (prefix-cache locality), least-loaded, or round-robin.

An episode's next turn, and a resumed partial rollout, send a prompt that extends a prompt sent before;
the server that served it holds those tokens in its radix cache. ``sticky`` sends the prompt there unless
that server is overloaded, the rule of sglang-router's cache-aware policy (``balance_abs_threshold``):
a server more than ``slack`` requests above the least-loaded one gets nothing new. Prompts are matched by
chained hashes of fixed-size token blocks, one dict probe per block.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping

BLOCK_TOKENS = 32  # prefix granularity: a turn adds far more tokens than this
MAX_BLOCKS = 200_000  # remembered block hashes (LRU); ~30 MB of dict at most


class ServerPicker:
    """Pick a server URL per request (``policy``: sticky, least_loaded or round_robin)."""

    def __init__(self, urls: list[str], policy: str = "sticky", slack: int = 4) -> None:
        if policy not in ("sticky", "least_loaded", "round_robin"):
            raise ValueError(f"unknown routing policy {policy!r}; use sticky, least_loaded or round_robin")
        self.urls, self.policy, self.slack = list(urls), policy, slack
        self._cycle = itertools.cycle(self.urls)
        self._owner: OrderedDict[int, str] = OrderedDict()  # chained block hash -> server that holds it

    def pick(self, input_ids: list[int], load: Mapping[str, int]) -> str:
        """The server for a prompt, given the requests in flight per server."""
        if len(self.urls) == 1:
            return self.urls[0]
        if self.policy == "round_robin":
            return next(self._cycle)
        least = min(self.urls, key=lambda u: load.get(u, 0))
        if self.policy == "least_loaded":
            return least
        holder = self._holder(input_ids)
        if holder is not None and load.get(holder, 0) <= load.get(least, 0) + self.slack:
            return holder
        return least

    def record(self, input_ids: list[int], url: str) -> None:
        """Remember that ``url`` now holds the blocks of ``input_ids``."""
        if self.policy != "sticky" or len(self.urls) == 1:
            return
        for key in _block_keys(input_ids):
            self._owner[key] = url
            self._owner.move_to_end(key)
        while len(self._owner) > MAX_BLOCKS:
            self._owner.popitem(last=False)

    def _holder(self, input_ids: list[int]) -> str | None:
        """The server holding the longest remembered prefix of ``input_ids``."""
        holder = None
        for key in _block_keys(input_ids):
            owner = self._owner.get(key)
            if owner is None:
                break
            holder = owner
        return holder


def _block_keys(input_ids: list[int]) -> list[int]:
    """Chained hashes of the prompt's full blocks: key i identifies tokens [0, (i+1) * BLOCK_TOKENS)."""
    keys, chained = [], 0
    for start in range(0, len(input_ids) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        chained = hash((chained, tuple(input_ids[start : start + BLOCK_TOKENS])))
        keys.append(chained)
    return keys
