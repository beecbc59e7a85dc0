"""Deterministic sampling for reproducible runs: a per-request seed derived from the content of the request.

Invariant: the seed of a request depends only on (base seed, step, input ids, how many identical
requests came before it in this step), never on timing or batch composition, so an uninterrupted
run and a killed-and-resumed one sample the same tokens (engine RNG state is not checkpointable).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from agentrl.engines.base import GenerateResult, InferenceEngine, ModelIdentity, SamplingParams


class SeededEngine:
    """Wraps an engine; fills ``SamplingParams.seed`` when the caller left it unset (trainer.deterministic)."""

    def __init__(self, engine: InferenceEngine, base_seed: int) -> None:
        self.inner = engine
        self.base_seed = base_seed
        self.step = 0
        self._seen: Counter[str] = Counter()

    def set_step(self, step: int) -> None:
        """Start a new step's seed stream."""
        self.step = step
        self._seen.clear()

    def request_seed(self, input_ids: list[int]) -> int:
        """A 31-bit seed from (base seed, step, input ids, occurrence)."""
        digest = hashlib.sha256(",".join(map(str, input_ids)).encode()).hexdigest()
        occurrence = self._seen[digest]
        self._seen[digest] += 1
        key = f"{self.base_seed}:{self.step}:{digest}:{occurrence}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "little") & 0x7FFFFFFF

    @property
    def semantics(self) -> Any:
        """The wrapped engine's logprob semantics."""
        return self.inner.semantics

    @property
    def weight_version(self) -> int:
        """The wrapped engine's policy version."""
        return self.inner.weight_version

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """Generate with a content-derived seed unless the caller set one."""
        if sampling.seed is None:
            sampling = sampling.model_copy(update={"seed": self.request_seed(list(input_ids))})
        return await self.inner.generate(input_ids, sampling, request_id)

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Abort on the wrapped engine."""
        await self.inner.abort(request_ids)

    async def update_weights(self, source: object, version: int) -> None:
        """Update the wrapped engine's weights."""
        await self.inner.update_weights(source, version)

    async def health(self) -> bool:
        """The wrapped engine's health."""
        return await self.inner.health()

    def model_identity(self) -> ModelIdentity:
        """The wrapped engine's model."""
        return self.inner.model_identity()

    async def close(self) -> None:
        """Close the wrapped engine."""
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # backend extras (load(), active_request_ids(), ...) pass through unchanged
        return getattr(self.inner, name)
