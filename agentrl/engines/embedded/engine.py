"""EmbeddedEngine: an in-process torch inference engine over any Hugging Face causal LM.

Continuous batching over a slot KV cache (``scheduler.py``), SGLang's logprob semantics, abort with
partial output, and in-place weight updates that bump ``weight_version``. Safe to call from any asyncio
loop or thread: the model lives on one background thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from pathlib import Path

import torch

from agentrl.engines.base import (
    GenerateResult,
    LogprobSemantics,
    ModelIdentity,
    SamplingParams,
    VersionSpan,
    new_request_id,
)
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.requests import Request
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.scheduler import Scheduler
from agentrl.engines.embedded.weights import copy_state_dict, load_safetensors_dir, share_storage
from agentrl.errors import EngineError, ModelLoadError


class EmbeddedEngine:
    """In-process engine: ``generate`` / ``abort`` / ``update_weights`` over a live torch model.

    Weight updates follow ``config.on_weight_update``: ``finish_old`` stops admitting requests, lets the
    running ones finish on the old weights, then swaps (queued requests start on the new weights);
    ``abort`` aborts the running requests (partial output returned) and swaps at once.
    """

    semantics = LogprobSemantics.TEMPERED_FULL_VOCAB

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: object,
        config: EmbeddedEngineConfig | None = None,
        *,
        model_path: str | None = None,
    ) -> None:
        self.config = config or EmbeddedEngineConfig()
        self.tokenizer = tokenizer
        self.model_path = model_path
        model_cfg = model.config
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        context = int(getattr(model_cfg, "max_position_embeddings", None) or self.config.max_seq_len)
        self.max_seq_len = min(self.config.max_seq_len, context)
        self.eos_ids = _eos_ids(model, tokenizer)
        self.runner = ModelRunner(
            model,
            max_seq_len=self.max_seq_len,
            max_rows=self.config.max_batch_size,
            weight_left_rows=self.config.weight_left_rows,
            own_matmul_rows=self.config.own_matmul_rows,
            pack_weights=self.config.pack_weights,
            cpu_kernels=self.config.cpu_kernels,
            native_kernels=self.config.native_kernels,
        )
        self.scheduler = Scheduler(
            self.runner,
            tokenizer,
            max_batch=self.config.max_batch_size,
            max_prefill_tokens=self.config.max_prefill_tokens,
            seed=self.config.seed,
            on_weight_update=self.config.on_weight_update,
            prefix_cache_tokens=self.config.prefix_cache_tokens,
            share_prefixes=self.config.share_prefixes,
        )
        self._closed = False

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        config: EmbeddedEngineConfig | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> EmbeddedEngine:
        """Load a Hugging Face model directory (weights + tokenizer) onto ``device``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = Path(path)
        if not (directory / "config.json").is_file():
            raise ModelLoadError(
                f"no Hugging Face model at {str(directory)!r} (config.json missing); make one with `agentrl make-model`"
            )
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).to(device)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        return cls(model, tokenizer, config, model_path=str(directory))

    @property
    def weight_version(self) -> int:
        """The policy version new tokens are sampled from."""
        return self.scheduler.version

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """Generate from ``input_ids``; an abort returns the tokens so far with ``finish_reason='abort'``."""
        rid = request_id or new_request_id()
        self._validate(input_ids, sampling)
        max_new = min(sampling.max_new_tokens, self.max_seq_len - len(input_ids))
        if max_new == 0:
            return GenerateResult(
                rid, [], [], "length", [VersionSpan(self.weight_version, 0, 0)], prompt_tokens=len(input_ids)
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerateResult] = loop.create_future()
        stop_ids = frozenset(sampling.stop_token_ids) | (frozenset() if sampling.ignore_eos else self.eos_ids)
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.runner.device).manual_seed(sampling.seed)
        req = Request(rid, list(input_ids), sampling, max_new, stop_ids, future, loop, generator)
        self.scheduler.submit(req)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:  # the caller gave up: free the slot instead of decoding on
            self.scheduler.abort([rid])
            raise

    def _validate(self, input_ids: list[int], sampling: SamplingParams) -> None:
        if self._closed:
            raise EngineError("the embedded engine is closed; create a new engine")
        if len(input_ids) == 0:
            raise EngineError(
                "input_ids is empty; send at least one prompt token (e.g. the chat template's generation prompt)"
            )
        if len(input_ids) >= self.max_seq_len:
            raise EngineError(
                f"prompt of {len(input_ids)} tokens does not fit the engine's context of {self.max_seq_len} tokens "
                "(engine.max_seq_len / the model's max_position_embeddings); shorten the episode "
                "(rollout.max_episode_tokens)"
            )
        if not all(isinstance(t, int) for t in input_ids):
            bad = next(t for t in input_ids if not isinstance(t, int))
            raise EngineError(
                f"input_ids must be token ids (ints), got {type(bad).__name__} {bad!r}; pass "
                "tokenizer(...)['input_ids'], not the encoding object"
            )
        low, high = min(input_ids), max(input_ids)
        if low < 0 or high >= self.vocab_size:
            raise EngineError(
                f"input_ids hold token id {low if low < 0 else high}, outside the model's vocabulary [0, "
                f"{self.vocab_size}); tokenize with the model's own tokenizer"
            )

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Abort these requests (None: all); their ``generate`` calls return partial output."""
        self.scheduler.abort(None if request_ids is None else list(request_ids))

    def active_request_ids(self) -> list[str]:
        """Ids of requests queued or running (the HTTP server matches abort prefixes on them)."""
        return self.scheduler.active_ids()

    async def update_weights(self, source: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        """Copy new weights (a state dict, or a safetensors directory) in place and set ``version``."""
        if isinstance(source, (str, Path)):
            state = await asyncio.to_thread(load_safetensors_dir, source)
        elif isinstance(source, Mapping):
            state = dict(source)
        else:
            raise EngineError(
                f"update_weights takes a state dict or a safetensors directory, got {type(source).__name__}"
            )
        done = self.scheduler.request_update(functools.partial(copy_state_dict, source=state), int(version))
        await asyncio.wrap_future(done)

    async def share_weights(self, trainer_model: torch.nn.Module, version: int) -> None:
        """Sample from ``trainer_model``'s own parameters from now on and set ``version`` (``share_storage``).

        The first call copies the trainer's values in and makes its parameters use the engine's storage (the
        trainer's own copy is freed); later calls check the sharing still holds. Only for a trainer that never
        steps its optimizer while this engine samples (a synchronous loop in this process).
        """
        share = functools.partial(share_storage, trainer_model=trainer_model)
        done = self.scheduler.request_update(share, int(version))
        await asyncio.wrap_future(done)

    async def health(self) -> bool:
        """True when a one-token generation completes (SGLang's /health_generate)."""
        if self._closed or not self.scheduler.alive:
            return False
        probe = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
        try:
            result = await asyncio.wait_for(self.generate([0], probe), timeout=60)
        except (EngineError, asyncio.TimeoutError):
            return False
        return result.finish_reason == "length"

    async def release_memory(self) -> None:
        """Free the KV buffers and the prefix cache as soon as no request runs (requests sent meanwhile wait).

        For an engine sharing the host with the trainer: its caches would otherwise sit through the update,
        though the update invalidates the prefix cache anyway; the next forward allocates the buffers again.
        """
        await asyncio.wrap_future(self.scheduler.request_release())

    def set_threads(self, threads: int | None) -> None:
        """Torch threads for the engine's forwards from its next step on (None: leave them as they are).

        For an engine sharing the host's cores with a trainer (async mode): it gets every core while the
        trainer is idle and its share while both run.
        """
        self.runner.threads = threads

    def model_identity(self) -> ModelIdentity:
        """The loaded model's Hugging Face config and the directory it came from."""
        return ModelIdentity(hf_config=self.runner.model.config.to_dict(), path=self.model_path)

    def flush_cache(self) -> None:
        """Drop the prefix cache (SGLang's /flush_cache); later prompts prefill in full."""
        self.scheduler.prefix_cache.clear()

    def load(self) -> dict[str, int]:
        """Running and waiting request counts."""
        running, waiting = self.scheduler.load()
        return {"num_running_reqs": running, "num_waiting_reqs": waiting}

    async def close(self) -> None:
        """Stop the scheduler thread; in-flight requests return as aborted (idempotent)."""
        if not self._closed:
            self._closed = True
            await asyncio.to_thread(self.scheduler.close)


def _eos_ids(model: torch.nn.Module, tokenizer: object) -> frozenset[int]:
    """EOS ids from the generation config, the model config and the tokenizer (SGLang stops on all)."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)
