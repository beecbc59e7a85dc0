"""Keys that TRL's GRPOConfig or verl's PPO config use, and what agentrl calls them.

An unknown key with one of these names is answered with agentrl's key (``agentrl.config.problems``) instead of
a spelling guess: ``learning_rate`` is not a typo of anything here, it is ``trainer.lr``. Each target is a dotted
key of the run config, checked by a test, so a renamed key shows up there.
"""

from __future__ import annotations

# foreign name -> (agentrl's dotted key, or "" when agentrl has no such setting; a note)
FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    "learning_rate": ("trainer.lr", "TRL's learning_rate"),
    "lr_warmup_steps": ("trainer.warmup_steps", "verl's lr_warmup_steps"),
    "warmup_ratio": ("trainer.warmup_steps", "TRL's warmup_ratio; agentrl counts optimizer steps"),
    "max_grad_norm": ("trainer.max_grad_norm", "TRL's max_grad_norm"),
    "grad_clip": ("trainer.max_grad_norm", "verl's grad_clip"),
    "num_train_epochs": ("trainer.steps", "TRL's num_train_epochs; agentrl counts RL steps"),
    "max_steps": ("trainer.steps", "TRL's max_steps"),
    "total_training_steps": ("trainer.steps", "verl's total_training_steps"),
    "num_generations": ("rollout.group_size", "TRL's num_generations: completions per prompt"),
    "n": ("rollout.group_size", "verl's rollout.n: responses per prompt"),
    "max_completion_length": ("rollout.max_new_tokens", "TRL's max_completion_length: tokens per turn"),
    "response_length": ("rollout.max_new_tokens", "verl's response_length: tokens per turn"),
    "max_prompt_length": ("rollout.max_episode_tokens", "TRL's max_prompt_length; agentrl bounds a whole episode"),
    "per_device_train_batch_size": (
        "rollout.prompts_per_step",
        "TRL's per_device_train_batch_size counts completions; agentrl's step takes prompts_per_step prompts x "
        "group_size episodes",
    ),
    "train_batch_size": ("rollout.prompts_per_step", "verl's train_batch_size: prompts per step"),
    "gradient_accumulation_steps": (
        "trainer.micro_batch_tokens",
        "TRL's gradient_accumulation_steps; agentrl accumulates micro-batches of micro_batch_tokens tokens into "
        "trainer.mini_batches optimizer steps per step",
    ),
    "ppo_mini_batch_size": ("trainer.mini_batches", "verl's ppo_mini_batch_size; agentrl counts mini-batches per step"),
    "num_iterations": ("trainer.mini_batches", "TRL's num_iterations"),
    "epsilon": ("algorithm.loss.eps_low", "TRL's epsilon (the clip range)"),
    "epsilon_high": ("algorithm.loss.eps_high", "TRL's epsilon_high"),
    "clip_ratio": ("algorithm.loss.eps_low", "verl's clip_ratio (and algorithm.loss.eps_high)"),
    "clip_ratio_low": ("algorithm.loss.eps_low", "verl's clip_ratio_low"),
    "clip_ratio_high": ("algorithm.loss.eps_high", "verl's clip_ratio_high"),
    "loss_type": ("algorithm.loss", "TRL's loss_type"),
    "importance_sampling_level": ("algorithm.loss", "TRL's importance_sampling_level (sequence: loss gspo)"),
    "scale_rewards": ("algorithm.adv_scale", "TRL's scale_rewards"),
    "model_name_or_path": ("model.path", "TRL's model_name_or_path: a local directory here"),
    "use_vllm": ("engine.kind", "TRL's use_vllm (engine.kind: vllm)"),
    "vllm_server_host": ("engine.urls", "TRL's vllm_server_host"),
    "bf16": ("trainer.precision", "TRL's bf16 (and model.dtype for the engine)"),
    "kl_coef": ("", "agentrl's losses have no KL penalty (the clip keeps the update near the sampling policy)"),
    "kl_loss_coef": ("", "agentrl's losses have no KL penalty (the clip keeps the update near the sampling policy)"),
    "beta": ("", "TRL's beta is a KL coefficient; agentrl's losses have no KL penalty"),
}


def foreign_key_hint(name: str) -> str:
    """ "That is TRL's learning_rate. Did you mean trainer.lr?" ('' for a name not listed)."""
    if name not in FOREIGN_KEYS:
        return ""
    target, note = FOREIGN_KEYS[name]
    if not target:
        return f"{name}: {note}; remove it."
    return f"That is {note}. Did you mean {target}?"
