"""Forward passes of the embedded engine: batched prefill and one-token decode over a SlotKVCache.

Row i of every returned logits tensor belongs to cache row i (prefill: to the i-th new prompt). The
runner holds no request state; the scheduler mirrors ``remove_row`` moves in its own row list.
"""

from __future__ import annotations

import inspect

import torch

from agentrl.engines.kv_cache import SlotKVCache
from agentrl.engines.lean_forward import LeanForward, lean_support


class ModelRunner:
    """Runs a Hugging Face causal LM over a shared slot KV cache (one thread at a time).

    Llama / Qwen2 / Qwen3 models run through ``LeanForward`` (same logits, far less Python per step);
    anything else, or ``lean=False``, runs the model's own HF forward. ``lean_reason`` says why not.
    """

    def __init__(self, model: torch.nn.Module, *, max_seq_len: int, lean: bool = True) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        num_layers = int(model.config.num_hidden_layers)
        self.cache = SlotKVCache(num_layers, max_cols=max_seq_len)
        params = inspect.signature(model.forward).parameters
        # transformers 5.x renamed past_key_values -> cache (the old name warns until 5.40)
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None
        self.lean_reason = lean_support(model) if lean else "disabled (lean=False)"
        self.lean = LeanForward(model, max_seq_len=max_seq_len) if self.lean_reason is None else None

    @property
    def num_rows(self) -> int:
        """Requests currently holding a cache row."""
        return self.cache.num_rows

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Add one cache row per prompt and return the next-token logits ``[k, vocab]``."""
        lengths = [len(p) for p in prompts]
        _, padded = self.cache.begin_prefill(lengths)
        ids = torch.zeros(len(prompts), padded, dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, padded - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        pads = padded - torch.tensor(lengths)
        positions = (torch.arange(padded)[None, :] - pads[:, None]).clamp(min=0)
        mask = self.cache.prefill_mask(lengths, padded, self.dtype, self.device)
        return self._forward(ids, positions, mask)

    @torch.inference_mode()
    def extend(self, prefix_kv: list[tuple[torch.Tensor, torch.Tensor]], suffix: list[int]) -> torch.Tensor:
        """Add one cache row that starts with cached keys/values and prefill only ``suffix`` after them;
        returns the next-token logits ``[1, vocab]``."""
        prefix = self.cache.begin_extend(prefix_kv, len(suffix))
        ids = torch.tensor([suffix], dtype=torch.long)
        positions = torch.arange(prefix, prefix + len(suffix))[None]
        mask = self.cache.extend_mask(prefix, len(suffix), self.dtype, self.device)
        return self._forward(ids, positions, mask)

    @torch.inference_mode()
    def row_kv(self, row: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of ``row``'s cached keys/values (for the prefix cache)."""
        return self.cache.row_kv(row)

    @torch.inference_mode()
    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        """Feed each row its last sampled token; returns the next-token logits ``[rows, vocab]``."""
        positions = torch.tensor(self.cache.lengths, dtype=torch.long, device=self.device)
        lo = self.cache.begin_decode()
        mask = self.cache.decode_mask(lo, self.dtype, self.device)
        ids = torch.tensor(last_tokens, dtype=torch.long, device=self.device)
        if self.lean is not None:
            logits = self.lean.decode(ids, positions, mask, self.cache)
        else:
            if mask is None:  # HF's forward gets the explicit mask: it would not know the window
                mask = torch.zeros(len(last_tokens), 1, 1, self.cache.end + 1 - lo, dtype=self.dtype, device=self.device)
            logits = self._forward(ids[:, None], positions[:, None], mask)
        self.cache.end_decode()
        return logits

    @torch.inference_mode()  # the buffers were allocated in inference mode
    def remove_row(self, row: int) -> None:
        """Free ``row``; the last row moves into it."""
        self.cache.remove_row(row)

    def clear(self) -> None:
        """Drop every row (after a failed forward the cache content is unknown)."""
        self.cache.clear()

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.lean is not None:
            return self.lean(ids.to(self.device), positions.to(self.device), mask, self.cache)
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
