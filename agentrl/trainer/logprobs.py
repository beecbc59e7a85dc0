"""Token logprobs log_softmax(logits.float() / T)[target] without materialising full-vocabulary logits.

Only the positions the loss needs go through the output head, in chunks of ``chunk_tokens`` under
activation checkpointing, so peak memory holds one [chunk, vocab] fp32 block instead of [b, L, vocab].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from agentrl.trainer.attention import packed_attention_kwargs
from agentrl.trainer.block_attention import AttentionBlocks


@dataclass
class TokenLogprobs:
    """Per-position logprobs (0 where not selected) and the detached entropy of selected positions."""

    logp_bt: torch.Tensor  # [b, L-1] fp32, carries the gradient
    entropy_n: torch.Tensor  # [n] fp32, detached


class _Float32HeadLinear(torch.autograd.Function):
    """``hidden @ weight.T + bias`` in float32, with the two matmuls of its backward in ``grad_dtype``.

    The logits feed the loss's ratios, so they are float32; their gradient is what autocast computes every
    other layer's in, so under bf16 autocast it is bf16 too (on a CPU with bf16 units float32 matmuls run at
    about a quarter of bf16's rate; docs/results/memory-and-speed.md measures the update with and without).
    """

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, grad_dtype: torch.dtype
    ) -> torch.Tensor:
        ctx.save_for_backward(hidden, weight)
        ctx.grad_dtype, ctx.has_bias = grad_dtype, bias is not None
        return nn.functional.linear(hidden.float(), weight.float(), None if bias is None else bias.float())

    @staticmethod
    def backward(ctx: Any, grad_logits: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight = ctx.saved_tensors
        grad = grad_logits.to(ctx.grad_dtype)
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad @ weight.to(ctx.grad_dtype)).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad.t() @ hidden.to(ctx.grad_dtype)).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_logits.sum(0)
        return grad_hidden, grad_weight, grad_bias, None


def _head_logits(hidden_nh: torch.Tensor, weight_vh: torch.Tensor, bias_v: torch.Tensor | None) -> torch.Tensor:
    """float32 logits; under autocast their backward runs in autocast's dtype (``_Float32HeadLinear``)."""
    device = hidden_nh.device.type
    autocast_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    with torch.autocast(device, enabled=False):
        if autocast_dtype is not None and torch.is_grad_enabled():
            return _Float32HeadLinear.apply(hidden_nh, weight_vh, bias_v, autocast_dtype)
        bias = None if bias_v is None else bias_v.float()
        return nn.functional.linear(hidden_nh.float(), weight_vh.float(), bias)


def _chunk_logprobs(
    hidden_nh: torch.Tensor,
    weight_vh: torch.Tensor,
    bias_v: torch.Tensor | None,
    targets_n: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logp of the targets and the entropy, for one chunk of positions (fp32 log-softmax).

    The head's forward runs in float32 even under bf16 autocast: a bf16 logit is off by up to ~0.4% of its
    size, which the loss's ratios exp(logp - logp_old) would carry.
    """
    logits = _head_logits(hidden_nh, weight_vh, bias_v) / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets_n[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


class PolicyLogprobs(nn.Module):
    """Wraps a Hugging Face causal LM; ``forward`` returns token logprobs of selected positions.

    Being the root module matters under FSDP2: its forward unshards the embedding and output head,
    which the chunked head uses outside the LM's own forward.
    """

    def __init__(self, lm: nn.Module, chunk_tokens: int = 1024) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(
        self,
        input_ids: torch.Tensor,
        select_bt: torch.Tensor,
        temperature: float,
        checkpoint_chunks: bool = True,
        *,
        position_ids: torch.Tensor | None = None,
        attention: torch.Tensor | None = None,
        blocks: AttentionBlocks | None = None,
    ) -> TokenLogprobs:
        """Logprobs of ``input_ids[:, t+1]`` at positions where ``select_bt[:, t]`` (shape [b, L-1]).

        ``attention`` ([b, 1, L, L] bool, True = may attend) and ``position_ids`` replace the causal mask and
        the positions 0..L-1, for rows that pack several episodes behind one prefix (``shared_prefix.py``);
        ``blocks``, the same rows' layouts, lets an SDPA model compute only the blocks that mask allows.
        """
        extra = {}
        if attention is not None:
            dtype = next(self.lm.parameters()).dtype
            extra = {**packed_attention_kwargs(self.lm, attention, blocks, dtype), "position_ids": position_ids}
        hidden = self.lm.get_decoder()(input_ids=input_ids, use_cache=False, **extra).last_hidden_state
        head = self.lm.get_output_embeddings()
        hidden_nh = hidden[:, :-1][select_bt]
        targets_n = input_ids[:, 1:][select_bt]
        logps, entropies = [], []
        for start in range(0, max(hidden_nh.shape[0], 1), self.chunk_tokens):
            part = slice(start, start + self.chunk_tokens)
            args = (hidden_nh[part], head.weight, head.bias, targets_n[part], temperature)
            if checkpoint_chunks and torch.is_grad_enabled():
                logp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
            else:
                logp, ent = _chunk_logprobs(*args)
            logps.append(logp)
            entropies.append(ent)
        logp_n = torch.cat(logps)
        logp_bt = torch.zeros(select_bt.shape, dtype=torch.float32, device=hidden.device).masked_scatter(
            select_bt, logp_n
        )
        return TokenLogprobs(logp_bt=logp_bt, entropy_n=torch.cat(entropies).detach())


def naive_token_logprobs(lm: nn.Module, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Reference: the full-vocabulary fp32 log-softmax of every position (memory-hungry; tests/bench)."""
    logits = lm(input_ids=input_ids, use_cache=False).logits[:, :-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
