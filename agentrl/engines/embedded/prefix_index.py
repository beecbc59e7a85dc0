"""Find which held token sequence shares the longest head with a prompt, without comparing every pair.

Sequences are cut into blocks of ``BLOCK`` tokens and each full block gets a chained hash (the hash of
the previous block's hash and this block's tokens), so two sequences whose i-th hashes are equal agree
on their first ``BLOCK * (i + 1)`` tokens. A ``PrefixIndex`` maps block hashes to the sequences that
hold them: a lookup is one dict probe per block of the prompt, then a token-level comparison of the
deepest block's owners past it. The chosen owner is verified on the tokens, so a hash collision can
only cost a shorter match, never a wrong one.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

BLOCK = 8  # also the shortest head worth sharing: below it a copy and a row gain nothing


class HoldsTokens(Protocol):
    """Something whose keys/values cover ``prefix_tokens`` (a running request, a kept entry)."""

    @property
    def prefix_tokens(self) -> list[int]: ...


Owner = TypeVar("Owner", bound=HoldsTokens)


def block_hashes(tokens: list[int]) -> list[int]:
    """Chained hashes of the full ``BLOCK``-token blocks of ``tokens``."""
    hashes: list[int] = []
    chained = 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        chained = hash((chained, tuple(tokens[start : start + BLOCK])))
        hashes.append(chained)
    return hashes


def shared_length(a: list[int], b: list[int], known: int = 0, *, verify: bool = True) -> int:
    """Length of the common head of ``a`` and ``b``, scanning from ``known`` onwards; ``verify`` checks
    the first ``known`` tokens too (a hash collision then yields the true length, not ``known``)."""
    if verify and a[:known] != b[:known]:
        known = 0
    limit = min(len(a), len(b))
    n = known
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class PrefixIndex(Generic[Owner]):
    """Block hash -> the owners holding that block (and, hashes being chained, every block before it)."""

    def __init__(self) -> None:
        self._by_hash: dict[int, dict[int, Owner]] = {}

    def add(self, owner: Owner, hashes: list[int]) -> None:
        """Index ``owner``'s blocks."""
        for h in hashes:
            self._by_hash.setdefault(h, {})[id(owner)] = owner

    def remove(self, owner: Owner, hashes: list[int]) -> None:
        """Forget ``owner``'s blocks; other owners of the same blocks stay findable."""
        for h in hashes:
            owners = self._by_hash.get(h)
            if owners is not None:
                owners.pop(id(owner), None)
                if not owners:
                    del self._by_hash[h]

    def clear(self) -> None:
        """Forget everything."""
        self._by_hash.clear()

    def longest(self, prompt: list[int], hashes: list[int]) -> tuple[Owner | None, int]:
        """The owner sharing the longest head with ``prompt`` (whose ``block_hashes`` are ``hashes``) and
        that length in tokens; (None, 0) when no full block is shared."""
        depth = 0
        for i, h in enumerate(hashes):  # chained hashes: block i shared implies every block before it
            if h not in self._by_hash:
                break
            depth = i + 1
        if depth == 0:
            return None, 0
        best, shared = None, 0
        for owner in self._by_hash[hashes[depth - 1]].values():  # owners of the deepest block differ after it
            n = shared_length(prompt, owner.prefix_tokens, depth * BLOCK, verify=False)
            if n > shared:
                best, shared = owner, n
        if best is not None and prompt[: depth * BLOCK] != best.prefix_tokens[: depth * BLOCK]:
            return best, shared_length(prompt, best.prefix_tokens)  # a hash collision: the true length
        return best, shared
