"""Token logprobs log_softmax(logits.float() / T)[target] without materialising full-vocabulary logits.

Only the positions the loss needs go through the output head, in chunks of ``chunk_tokens`` under
activation checkpointing, so peak memory holds one [chunk, vocab] fp32 block instead of [b, L, vocab].
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _chunk_logprobs(
    hidden_nh: torch.Tensor,
    weight_vh: torch.Tensor,
    bias_v: torch.Tensor | None,
    targets_n: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logp of the targets and the entropy, for one chunk of positions (fp32 log-softmax).

    The head runs in float32 even under bf16 autocast: a bf16 logit is off by up to ~0.4% of its size, which
    the loss's ratios exp(logp - logp_old) would carry; the head is a small share of the model's FLOPs.
    """
    with torch.autocast(hidden_nh.device.type, enabled=False):
        bias = None if bias_v is None else bias_v.float()
        logits = nn.functional.linear(hidden_nh.float(), weight_vh.float(), bias) / temperature
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
