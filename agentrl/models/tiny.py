"""Build a tiny Qwen3-architecture model offline: random weights, a locally trained byte-level BPE
tokenizer and a ChatML chat template, saved in Hugging Face format.

It exists so tests and laptops need no model hub; ``from_pretrained(DIR)`` loads it offline.
"""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path
from typing import Literal

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]


def _training_corpus(num_lines: int = 20000, seed: int = 0) -> list[str]:
    """Text to train the BPE on: Python stdlib source (code) plus ChatML-shaped chat lines."""
    import asyncio
    import collections
    import json as json_module

    lines: list[str] = []
    for module in (collections, json_module, asyncio, random, inspect):
        lines.extend(inspect.getsource(module).splitlines())
    rng = random.Random(seed)
    words = "the a def return print sum of numbers list string write function add two result test assert".split()
    for _ in range(2000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
    return lines[:num_lines]


def build_tokenizer(vocab_size: int = 2048):
    """Train a byte-level BPE tokenizer locally and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_training_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[],
    )
    tokenizer.add_tokens(ADDED_TOKENS)
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def make_tiny_model(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 2048,
    seed: int = 0,
    architecture: Literal["qwen3", "llama"] = "qwen3",
    head_dim: int | None = None,
    tie_word_embeddings: bool = True,
) -> Path:
    """Write a random-weight Qwen3 (or Llama: SmolLM2's architecture, which SGLang's CPU server runs) model
    with a ChatML tokenizer to ``out_dir``; returns the path.

    ``head_dim`` defaults to ``hidden_size // 4`` (4 query heads); servers whose attention kernels need wider
    heads (vLLM's CPU attention: >= 64) set it; ``tie_word_embeddings=False`` gives the LM head its own weights.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config_class, model_class = (
        (LlamaConfig, LlamaForCausalLM) if architecture == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    )
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim or hidden_size // 4,
        max_position_embeddings=4096,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "agentrl_model.json").write_text(
        json.dumps({"kind": "tiny", "seed": seed, "architecture": architecture}) + "\n"
    )
    return out
