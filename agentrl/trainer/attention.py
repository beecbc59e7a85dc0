"""A custom attention mask in the form the model's attention implementation takes."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.errors import ConfigError
from agentrl.trainer.block_attention import BLOCK_SDPA, AttentionBlocks, register_block_attention

# Attention implementations that take a custom [b, 1, L, L] mask as it is (transformers' masking utilities
# return a 4D mask unchanged); flash-attention kernels take no such mask.
MASK_KINDS = {"sdpa": "bool", BLOCK_SDPA: "bool", "eager": "additive"}


def attention_mask_for(lm: torch.nn.Module, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The block mask in the form the model's attention implementation takes (bool for sdpa, additive for eager)."""
    impl = getattr(getattr(lm, "config", None), "_attn_implementation", None) or "eager"
    kind = MASK_KINDS.get(impl)
    if kind is None:
        raise ConfigError(
            f"trainer.pack_shared_prompts needs an attention implementation that takes a custom 4D mask "
            f"({sorted(MASK_KINDS)}), but the model uses {impl!r}; set trainer.pack_shared_prompts: false or load the "
            "model with attn_implementation='sdpa'"
        )
    if kind == "bool":
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def packed_attention_kwargs(
    lm: torch.nn.Module, mask: torch.Tensor, blocks: AttentionBlocks | None, dtype: torch.dtype
) -> dict[str, Any]:
    """Keyword arguments for the decoder's forward over packed rows: the block mask in the model's form, and
    for an SDPA model the row layouts, which it then computes block by block (``block_attention.py``)."""
    config = getattr(lm, "config", None)
    if blocks is not None and getattr(config, "_attn_implementation", None) == "sdpa":
        register_block_attention()
        lm.set_attn_implementation(BLOCK_SDPA)  # type: ignore[operator]  # SDPA itself for every other call
    extra: dict[str, Any] = {"attention_mask": attention_mask_for(lm, mask, dtype)}
    if blocks is not None and getattr(config, "_attn_implementation", None) == BLOCK_SDPA:
        extra["attention_blocks"] = blocks
    return extra
