"""The token-in/token-out inference protocol every engine backend implements.

Invariant: ``GenerateResult.output_ids`` holds the sampled tokens exactly (stop token included)
and ``logprobs[i]`` is the float32 log-probability of ``output_ids[i]`` under the semantics named
in ``semantics``; ``version_spans`` cover ``[0, len(output_ids))`` without gaps. What the trainer
needs before an engine exists (its weight transport, its preflight) comes from the backend's
config (``agentrl.engines.config.EngineConfig``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

FinishReason = Literal["stop", "length", "abort"]


class LogprobSemantics(str, Enum):
    """What an engine's per-token logprobs mean (docs/engines.md#what-an-engines-logprobs-mean)."""

    TEMPERED_FULL_VOCAB = "tempered_full_vocab"  # log_softmax(logits.float() / T): SGLang's default
    RAW = "raw"  # log_softmax(logits) ignoring temperature (SGLANG_RETURN_ORIGINAL_LOGPROB)
    NONE = "none"  # the backend returns no logprobs


class SamplingParams(BaseModel):
    """Sampling settings of one request, named as in SGLang's ``sampling_params``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_new_tokens: int = Field(256, ge=0, description="Most tokens to generate for this request.")
    temperature: float = Field(1.0, ge=0.0, description="Softmax temperature; 0 means greedy.")
    top_p: float = Field(
        1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; keep 1.0 for training (logprobs ignore it)."
    )
    top_k: int = Field(-1, description="Sample only among the k most likely tokens; -1 disables.")
    stop_token_ids: tuple[int, ...] = Field((), description="Token ids that end generation (kept in the output).")
    stop: tuple[str, ...] = Field(
        (),
        description="Strings that end generation when the decoded output contains them; the output keeps the tokens "
        "through the match.",
    )
    ignore_eos: bool = Field(False, description="Keep generating past the tokenizer's EOS token.")
    seed: int | None = Field(
        None, description="Per-request sampling seed (SGLang's sampling_seed); None draws from the engine's generator."
    )


@dataclass(frozen=True)
class VersionSpan:
    """Output tokens ``[start, end)`` were produced by policy ``version``."""

    version: int
    start: int
    end: int


@dataclass
class GenerateResult:
    """What one ``generate`` call returns (an aborted request returns its partial tokens)."""

    request_id: str
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    version_spans: list[VersionSpan]
    prompt_tokens: int
    cached_tokens: int = 0
    semantics: LogprobSemantics = LogprobSemantics.TEMPERED_FULL_VOCAB
    matched_stop: int | str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def token_versions(self) -> list[int]:
        """One policy version per output token, expanded from ``version_spans``."""
        versions: list[int] = []
        for span in self.version_spans:
            versions.extend([span.version] * (span.end - span.start))
        return versions


@dataclass(frozen=True)
class ModelIdentity:
    """Which model an engine samples from, as far as it knows: the Hugging Face config of the served
    model (empty when unknown) and the directory it came from (None when unknown)."""

    hf_config: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None


def new_request_id() -> str:
    """A fixed-length uuid hex: SGLang aborts by rid *prefix*, so no rid may prefix another."""
    return uuid.uuid4().hex


@runtime_checkable
class InferenceEngine(Protocol):
    """Async token-in/token-out engine: the only thing rollouts know about inference."""

    semantics: LogprobSemantics

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """Generate from ``input_ids``; never re-tokenizes; returns sampled ids and logprobs."""
        ...

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Abort these requests (``None``: all); their ``generate`` calls return partial output."""
        ...

    async def update_weights(self, source: object, version: int) -> None:
        """Load new policy weights (a state dict or a safetensors directory) as ``version``."""
        ...

    @property
    def weight_version(self) -> int:
        """The policy version new tokens are sampled from."""
        ...

    async def health(self) -> bool:
        """True when the engine can serve a generation."""
        ...

    def model_identity(self) -> ModelIdentity:
        """The model this engine serves (rollout fingerprints compare its architecture on resume)."""
        ...

    async def close(self) -> None:
        """Release the engine's resources (idempotent)."""
        ...
