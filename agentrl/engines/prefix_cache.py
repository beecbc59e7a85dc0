"""Keys and values of finished requests, kept so that a prompt extending one prefills only its new tokens.

Multi-turn rollouts resubmit the whole history every turn (``input_ids`` = previous prompt + reply +
observation), and a resumed partial rollout resubmits ``prompt + partial output``. Without this cache
the engine would recompute the history's keys and values each time; with it, the follow-up request
reuses them and prefills only the tokens after the longest kept prefix (reported as ``cached_tokens``,
like SGLang's radix cache). Entries are exact token prefixes, evicted least recently used under a token
budget, consumed by the request that reuses them, and dropped whenever the weights change: keys and
values computed by old weights would not be the new policy's.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import torch

LayerKV = tuple[torch.Tensor, torch.Tensor]  # one layer's keys and values ``[kv_heads, tokens, head_dim]``


@dataclass
class PrefixEntry:
    """The cached keys/values of ``tokens`` (one pair per layer)."""

    tokens: list[int]
    kv: list[LayerKV]


class PrefixCache:
    """A token-budgeted LRU of ``PrefixEntry``; thread-safe (the HTTP server may flush it)."""

    def __init__(self, max_tokens: int, *, min_tokens: int = 8) -> None:
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens  # shorter prefixes are not worth a copy and a separate forward
        self.hits = 0
        self.hit_tokens = 0
        self._entries: collections.OrderedDict[int, PrefixEntry] = collections.OrderedDict()
        self._tokens = 0
        self._next_key = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False when the budget is 0."""
        return self.max_tokens >= self.min_tokens

    @property
    def num_tokens(self) -> int:
        """Tokens held now."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: list[int], kv: list[LayerKV]) -> None:
        """Keep ``kv`` for ``tokens``, evicting the least recently used entries to stay in budget."""
        if len(tokens) < self.min_tokens or len(tokens) > self.max_tokens:
            return
        with self._lock:
            while self._entries and self._tokens + len(tokens) > self.max_tokens:
                _, evicted = self._entries.popitem(last=False)
                self._tokens -= len(evicted.tokens)
            self._entries[self._next_key] = PrefixEntry(list(tokens), kv)
            self._next_key += 1
            self._tokens += len(tokens)

    def take(self, prompt: list[int]) -> PrefixEntry | None:
        """Remove and return the longest entry whose tokens are a strict prefix of ``prompt`` (None: no hit).

        Strict: at least one prompt token must be left to prefill, since its logits start the reply.
        """
        with self._lock:
            best_key, best_len = None, 0
            for key, entry in self._entries.items():
                n = len(entry.tokens)
                # cheap rejections before comparing whole prefixes
                if n <= best_len or n >= len(prompt) or entry.tokens[-1] != prompt[n - 1] or entry.tokens[0] != prompt[0]:
                    continue
                if prompt[:n] == entry.tokens:
                    best_key, best_len = key, n
            if best_key is None:
                return None
            entry = self._entries.pop(best_key)
            self._tokens -= best_len
            self.hits += 1
            self.hit_tokens += best_len
            return entry

    def clear(self) -> None:
        """Drop every entry (weights changed, or /flush_cache)."""
        with self._lock:
            self._entries.clear()
            self._tokens = 0
