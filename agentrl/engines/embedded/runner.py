"""Forward passes of the embedded engine over a SlotKVCache: mixed steps (decode every running row and
admit new ones in one pass), and prefill / decode / extend as the special cases of a step.

A step's logits have one row per running row, then one per new row, in order; new rows are appended
to the cache in that order. The runner holds no request state; the scheduler mirrors ``remove_row``
moves in its own row list.
"""

from __future__ import annotations

import inspect

import torch

from agentrl.engines.embedded.config import CpuKernelsSetting, NativeKernelsSetting
from agentrl.engines.embedded.cpu.select import KernelSettings, ModelShape, select
from agentrl.engines.embedded.kv_cache import PrefixKV, SlotKVCache
from agentrl.engines.embedded.lean_forward import (
    LeanForward,
    default_weight_left_rows,
    lean_support,
    projection_shapes,
)
from agentrl.errors import EngineConfigError


class ModelRunner:
    """Runs a Hugging Face causal LM over a shared slot KV cache (one thread at a time).

    Llama / Qwen2 / Qwen3 models run through ``LeanForward`` (same logits, far less Python per step);
    anything else, or ``lean=False``, runs the model's own HF forward. ``lean_reason`` says why not.
    The lean forward's CPU acceleration is one ``CpuKernels`` set (``cpu/select.py``, ``kernels``).
    ``cpu_kernels``: bf16 runs on SGLang's CPU kernels where they load (auto), always (sglang: an error names why
    they cannot) or never (torch); ``kernels_problem`` says why they are not used. ``native_kernels``: agentrl's own
    kernels too (``cpu/native.py``: bf16 matmul, decode attention and decode steps' layer loop in C++) where they
    build (auto), always (on) or never (off); ``native_problem`` says why they are not used.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        max_seq_len: int,
        lean: bool = True,
        max_rows: int | None = None,
        weight_left_rows: int | None = None,
        own_matmul_rows: int | None = None,
        pack_weights: bool | None = None,
        cpu_kernels: CpuKernelsSetting = "auto",
        native_kernels: NativeKernelsSetting = "auto",
    ) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        num_layers = int(model.config.num_hidden_layers)
        self.cache = SlotKVCache(num_layers, max_cols=max_seq_len, max_rows=max_rows)
        params = inspect.signature(model.forward).parameters
        # transformers 5.x renamed past_key_values -> cache (the old name warns until 5.40)
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None
        self.lean_reason = lean_support(model) if lean else "disabled (lean=False)"
        if weight_left_rows is None:
            weight_left_rows = default_weight_left_rows(self.dtype, self.device)
        shape = ModelShape(
            self.dtype,
            self.device,
            int(model.model.layers[0].self_attn.head_dim) if self.lean_reason is None else 0,
            frozenset(projection_shapes(model)) if self.lean_reason is None else frozenset(),
            self.lean_reason,
        )
        self.kernels = select(shape, KernelSettings(cpu_kernels, native_kernels, pack_weights))
        self.pack_problem = self.kernels.problems["pack"]
        self.kernels_problem = self.kernels.problems["sglang"]
        self.native_problem = self.kernels.problems["native"]
        self.lean = (
            LeanForward(model, max_seq_len=max_seq_len, weight_left_rows=weight_left_rows, kernels=self.kernels)
            if self.lean_reason is None
            else None
        )
        if own_matmul_rows:
            self._require_own_matmul(own_matmul_rows)
        if own_matmul_rows is not None and self.lean is not None:
            self.lean.own_matmul_rows = own_matmul_rows
        # torch threads for the next steps, settable from any thread; None keeps the engine thread's own. The
        # setting is per thread once a thread has used torch, so it is applied here, in the engine's thread.
        self.threads: int | None = None

    def _require_own_matmul(self, rows: int) -> None:
        """Raise naming why agentrl's float32 matmul cannot take the steps ``engine.own_matmul_rows`` asks for."""
        if self.lean is not None and self.kernels.own_matmul_rows > 0:
            return
        why = (
            f"the lean forward is not used ({self.lean_reason})" if self.lean is None
            else "the model is not float32" if self.dtype != torch.float32
            else self.native_problem or "it is built and measured for x86-64 only"
        )  # fmt: skip
        raise EngineConfigError(
            f"engine.own_matmul_rows is {rows} but agentrl's float32 matmul does not run here ({why}); set it to "
            "null (auto) or 0"
        )

    @property
    def num_rows(self) -> int:
        """Requests currently holding a cache row."""
        return self.cache.num_rows

    @torch.inference_mode()
    def step(self, last_tokens: list[int], new_rows: list[tuple[PrefixKV | None, list[int]]]) -> torch.Tensor:
        """Decode ``last_tokens`` (one per running row: all rows, or none) and admit ``new_rows``
        (kept prefix keys/values or None, then the tokens to prefill); returns the next-token logits
        ``[len(last_tokens) + len(new_rows), vocab]``. The lean forward does it in one pass; HF's
        forward in one decode pass, one batched prefill of the fresh rows, one pass per extended row
        (pass fresh rows before extended ones, so the row order is the same either way)."""
        if self.threads is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if self.lean is not None:
            layout = self.cache.begin_step(
                len(last_tokens), [(kv, len(ids)) for kv, ids in new_rows], self.dtype, self.device
            )
            flat = [*last_tokens, *(t for _, ids in new_rows for t in ids)]
            logits = self.lean.step(torch.tensor(flat, dtype=torch.long, device=self.device), layout, self.cache)
            self.cache.end_step(layout)
            return logits
        parts = [self._hf_decode(last_tokens)] if last_tokens else []
        fresh = [ids for kv, ids in new_rows if kv is None]
        if fresh:
            parts.append(self._hf_prefill(fresh))
        parts.extend(self._hf_extend(kv, ids) for kv, ids in new_rows if kv is not None)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Add one cache row per prompt and return the next-token logits ``[k, vocab]``."""
        return self.step([], [(None, list(p)) for p in prompts])

    def extend(self, prefix_kv: PrefixKV, suffix: list[int]) -> torch.Tensor:
        """Add one cache row that starts with kept keys/values and prefill only ``suffix`` after them;
        returns the next-token logits ``[1, vocab]``."""
        return self.step([], [(prefix_kv, list(suffix))])

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        """Feed each row its last sampled token; returns the next-token logits ``[rows, vocab]``."""
        return self.step(list(last_tokens), [])

    def _hf_prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        lengths = [len(p) for p in prompts]
        _, padded = self.cache.begin_prefill(lengths)
        ids = torch.zeros(len(prompts), padded, dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, padded - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        pads = padded - torch.tensor(lengths)
        positions = (torch.arange(padded)[None, :] - pads[:, None]).clamp(min=0)
        mask = self.cache.prefill_mask(lengths, padded, self.dtype, self.device)
        return self._hf_forward(ids, positions, mask)

    def _hf_extend(self, prefix_kv: PrefixKV, suffix: list[int]) -> torch.Tensor:
        prefix = self.cache.begin_extend(prefix_kv, len(suffix))
        ids = torch.tensor([suffix], dtype=torch.long)
        positions = torch.arange(prefix, prefix + len(suffix))[None]
        mask = self.cache.extend_mask(prefix, len(suffix), self.dtype, self.device)
        return self._hf_forward(ids, positions, mask)

    def _hf_decode(self, last_tokens: list[int]) -> torch.Tensor:
        positions = torch.tensor(self.cache.lengths, dtype=torch.long)[:, None]
        lo = self.cache.begin_decode()
        mask = self.cache.decode_mask(lo, self.dtype, self.device)
        if mask is None:  # HF's forward gets the explicit mask: it would not know the window
            mask = torch.zeros(len(last_tokens), 1, 1, self.cache.end + 1 - lo, dtype=self.dtype, device=self.device)
        logits = self._hf_forward(torch.tensor(last_tokens, dtype=torch.long)[:, None], positions, mask)
        self.cache.end_decode()
        return logits

    @torch.inference_mode()
    def row_kv(self, row: int, length: int | None = None) -> PrefixKV:
        """Copies of ``row``'s first ``length`` (default: all) cached keys/values (for sharing and the prefix cache)."""
        return self.cache.row_kv(row, length)

    @torch.inference_mode()  # the buffers were allocated in inference mode
    def remove_row(self, row: int) -> None:
        """Free ``row``; the last row moves into it."""
        self.cache.remove_row(row)

    def clear(self) -> None:
        """Drop every row (after a failed forward the cache content is unknown)."""
        self.cache.clear()

    def free(self) -> None:
        """Drop every row and release the KV buffers and packed weights (rebuilt on the next forward)."""
        self.cache.free()
        self.weights_changed()

    def weights_changed(self) -> None:
        """The model's weights were updated: drop copies derived from them (the lean forward's packed weights)."""
        if self.lean is not None:
            self.lean.drop_packed()

    def _hf_forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        kwargs: dict[str, object] = {self._cache_kw: self.cache, "use_cache": True}
        if self._keep_kw:
            kwargs[self._keep_kw] = 1
        out = self.model(
            input_ids=ids.to(self.device),
            position_ids=positions.to(self.device),
            attention_mask=mask,
            **kwargs,
        )
        return out.logits[:, -1, :]
