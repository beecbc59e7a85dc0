"""The plain config sections of a run: model, env, rollout (``agentrl.config.rollout``), trainer, logging, eval.

Each field is documented once, here (a plug-in's settings on its own class); the engine section is one model
per backend (``agentrl.engines.registry``) and the algorithm section lives with its registries
(``agentrl.algos.config``). Cross-field checks live in ``agentrl.job.run_config``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agentrl.config.base import StrictModel
from agentrl.config.evaluation import EvalConfig, SplitEval
from agentrl.config.rollout import RolloutConfig

__all__ = [
    "ModelConfig",
    "EnvConfig",
    "RolloutConfig",
    "TrainerConfig",
    "LoggingConfig",
    "EvalConfig",
    "SplitEval",
]


class ModelConfig(StrictModel):
    """Which Hugging Face causal LM to train and serve."""

    path: str = Field(
        description="Local Hugging Face model directory (config.json, safetensors, tokenizer). Make one with `agentrl "
        "make-model`. `agentrl train` (a fresh run) and `agentrl eval` also take a training run's directory (or its "
        "checkpoints/latest, or one step_* checkpoint): its checkpoint's model."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16", "bfloat16_if_fast"] = Field(
        "auto",
        description="The engine's weights dtype (the trainer keeps float32 master weights): auto = bfloat16 on "
        "CUDA, float32 on CPU; bfloat16_if_fast = bfloat16 where the device computes it in hardware (CUDA, a CPU "
        "with AVX512-BF16 or AMX), else float32.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the trainer (and embedded engine) run: auto = cuda if available."
    )


class EnvConfig(StrictModel):
    """Which environment to run and its constructor arguments."""

    id: str = Field(description="Gymnasium registry id (agentrl/CodeExec-v0) or 'module:Class'.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the env constructor (checked by the env's config model, if it has one).",
    )
    import_modules: list[str] = Field(
        default_factory=list,
        description="Your modules whose import registers envs (the bundled envs are always there).",
    )
    step_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds an env reset/step may take; a longer call fails its episode (a drop) and sets the env "
        "aside. None: no limit (a notice every 30 s of waiting).",
    )


class TrainerConfig(StrictModel):
    """Optimisation settings of the policy update."""

    steps: int = Field(10, ge=1, description="Training steps (rollout + update) to run.")
    lr: float = Field(1e-6, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear LR warm-up, in optimizer steps.")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="LR schedule after warm-up.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping by global norm.")
    mini_batches: int = Field(
        4, ge=1, description="Optimizer steps per rollout batch (the batch is split into this many mini-batches)."
    )
    micro_batch_tokens: int = Field(
        8192, ge=64, description="Token budget of one packed micro-batch (bounds activation memory)."
    )
    gradient_checkpointing: bool = Field(
        True, description="Recompute activations in backward (bounds activation memory; costs part of a forward)."
    )
    keep_activations_tokens: int = Field(
        0,
        ge=0,
        description="With gradient_checkpointing: keep the activations of as many decoder layers as this many tokens "
        "through the whole model would hold. A micro-batch of T tokens recomputes ceil(L x (1 - N/T)) of its L "
        "layers; one of at most N tokens recomputes none. 0 recomputes every layer (trainer/layer_checkpointing.py).",
    )
    pack_shared_prompts: bool = Field(
        True,
        description="Forward the episodes that share a prompt as one packed row (the prompt once, a block mask), "
        "in the update and the recompute: the same loss with (G - 1) x prompt fewer tokens per group. Needs "
        "sdpa or eager attention.",
    )
    pack_shared_prompts_max_len: int = Field(
        2048,
        ge=64,
        description="Longest packed row (also at most micro_batch_tokens): attention over a packed row costs its "
        "length squared with a dense mask, the blocks its mask allows with packed_attention: blocks.",
    )
    packed_attention: Literal["blocks", "mask"] = Field(
        "blocks",
        description="How an SDPA model attends over packed rows: blocks computes only what the block mask allows (the "
        "prefix, each continuation onto prefix and itself; trainer/block_attention.py); mask runs SDPA over the whole "
        "packed row with the mask. Same logprobs and gradients up to float rounding.",
    )
    precision: Literal["auto", "float32", "bfloat16_autocast", "bfloat16_autocast_if_fast"] = Field(
        "auto",
        description="bfloat16_autocast: the update's matmuls in bf16 (CUDA or CPU; weights, AdamW, head logits, "
        "loss stay float32; on a CPU only with bf16 units, see bench/bench_roofline.py); auto: bfloat16_autocast on "
        "CUDA, float32 on CPU; bfloat16_autocast_if_fast: bf16 where the device computes it in hardware (CUDA, a CPU "
        "with AVX512-BF16 or AMX).",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=16,
        description="Tokens per chunk when computing logprobs, so the full-vocab fp32 log-softmax is never "
        "materialised at once.",
    )
    checkpoint_every_steps: int = Field(10, ge=1, description="Checkpoint every N steps (and at the end).")
    checkpoint_every_s: float | None = Field(
        600.0,
        gt=0.0,
        description="Also checkpoint at the first step boundary this many seconds after the last checkpoint (or the "
        "job's start), so a killed job loses at most about this long plus one step; null: by step count only.",
    )
    keep_checkpoints: int = Field(
        1,
        ge=1,
        description="How many recent checkpoints to keep; --resume needs only the latest (each is written whole "
        "before the previous is removed).",
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: rollouts, then the update, then the weight sync. async (one step off): step k+1's rollouts "
        "are collected while step k's update runs in a worker thread; weights reach the engine at the step "
        "boundary, so trained tokens are one version old (needs rollout.max_staleness >= 1). See docs/async.md.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads of each busy side (the engine thread and the trainer thread take this "
        "many each). None: every core in sync mode (only one side runs at a time), half the cores in async mode, and "
        "every core for the rest of an async update once the engine has finished collecting.",
    )
    seed: int = Field(0, description="Seed of torch, python and numpy RNGs (default: the run's seed).")
    deterministic: bool = Field(
        False, description="Use deterministic algorithms (CPU runs then reproduce exactly across kill/resume)."
    )


class LoggingConfig(StrictModel):
    """Where and how a run reports."""

    run_root: str = Field("runs", description="Run directories are created under this folder.")
    run_name: str | None = Field(None, description="Run directory name (default: <config stem>-<timestamp>).")
    wandb_project: str | None = Field(
        "agentrl", description="wandb project; runs offline (saved in the run directory) unless WANDB_API_KEY is set."
    )
    wandb_mode: Literal["auto", "online", "offline", "disabled"] = Field(
        "auto", description="auto: online with an API key, else offline."
    )
    progress: bool = Field(
        True,
        description="Show the rich progress bar with live metrics when stdout is a terminal; elsewhere (a log "
        "file), or when false, one full line per step.",
    )
    plot_every: int = Field(1, ge=1, description="Refresh the PNG plots every N steps.")
