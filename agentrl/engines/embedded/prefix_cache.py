"""Keys and values of finished requests, kept so that a prompt extending one prefills only its new tokens.

Multi-turn rollouts resubmit the whole history every turn (``input_ids`` = previous prompt + reply +
observation), and a resumed partial rollout resubmits ``prompt + partial output``. Without this cache
the engine would recompute the history's keys and values each time; with it, the follow-up request
reuses them and prefills only the tokens after the longest shared head (reported as ``cached_tokens``,
like SGLang's radix cache). Entries are found by block hash (``prefix_index.py``), evicted least
recently used under a token budget, consumed by a request that extends one whole, and dropped whenever
the weights change: keys and values computed by old weights would not be the new policy's.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

from agentrl.engines.embedded.kv_cache import PrefixKV
from agentrl.engines.embedded.prefix_index import BLOCK, PrefixIndex, block_hashes


@dataclass(eq=False)
class PrefixEntry:
    """The cached keys/values of ``tokens`` (one pair per layer)."""

    tokens: list[int]
    kv: PrefixKV
    hashes: list[int] = field(default_factory=list)

    @property
    def prefix_tokens(self) -> list[int]:
        """The tokens the keys/values cover (what ``PrefixIndex`` compares prompts against)."""
        return self.tokens


class PrefixCache:
    """A token-budgeted LRU of ``PrefixEntry``, indexed by block hash; thread-safe (the HTTP server may flush it)."""

    def __init__(self, max_tokens: int, *, min_tokens: int = BLOCK) -> None:
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens  # shorter heads are not worth a copy
        self.hits = 0
        self.hit_tokens = 0
        self._entries: collections.OrderedDict[int, PrefixEntry] = collections.OrderedDict()
        self._index: PrefixIndex[PrefixEntry] = PrefixIndex()
        self._tokens = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False when the budget is below one block."""
        return self.max_tokens >= self.min_tokens

    @property
    def num_tokens(self) -> int:
        """Tokens held now."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: list[int], kv: PrefixKV) -> None:
        """Keep ``kv`` for ``tokens``, evicting the least recently used entries to stay in budget."""
        if len(tokens) < self.min_tokens or len(tokens) > self.max_tokens:
            return
        entry = PrefixEntry(list(tokens), kv, block_hashes(tokens))
        with self._lock:
            while self._entries and self._tokens + len(tokens) > self.max_tokens:
                self._drop(next(iter(self._entries.values())))
            self._entries[id(entry)] = entry
            self._index.add(entry, entry.hashes)
            self._tokens += len(tokens)

    def longest(self, prompt: list[int], hashes: list[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest head with ``prompt`` (``hashes``: its ``block_hashes``), and how
        many tokens; (None, 0) below ``min_tokens``."""
        with self._lock:
            entry, shared = self._index.longest(prompt, hashes)
        return (entry, shared) if entry is not None and shared >= self.min_tokens else (None, 0)

    def use(self, entry: PrefixEntry, length: int) -> PrefixKV:
        """The keys/values of ``entry``'s first ``length`` tokens; an entry used whole is removed (the
        request extending it leaves a longer one when it finishes), a partly used one stays (recent)."""
        with self._lock:
            self.hits += 1
            self.hit_tokens += length
            if id(entry) in self._entries:
                if length >= len(entry.tokens):
                    self._drop(entry)
                else:
                    self._entries.move_to_end(id(entry))
        return entry.kv if length >= len(entry.tokens) else [(k[:, :length], v[:, :length]) for k, v in entry.kv]

    def clear(self) -> None:
        """Drop every entry (weights changed, or /flush_cache)."""
        with self._lock:
            self._entries.clear()
            self._index.clear()
            self._tokens = 0

    def _drop(self, entry: PrefixEntry) -> None:
        del self._entries[id(entry)]
        self._index.remove(entry, entry.hashes)
        self._tokens -= len(entry.tokens)
