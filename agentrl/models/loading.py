"""Load a local Hugging Face causal LM and its tokenizer (offline; no hub look-ups).

Every failure is a ``ModelLoadError`` naming the directory or file and how to make one
(``agentrl make-model tiny|smollm2 --out DIR``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config.sections import ModelConfig
from agentrl.errors import ModelLoadError, TemplateError

MAKE_HINT = (
    "create one with `agentrl make-model tiny --out {path}` (or `agentrl make-model smollm2 --out {path}`), or "
    "set model.path to a local Hugging Face model directory (the bundled configs' models are made by "
    "`bash scripts/quickstart.sh`)"
)
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def check_model_dir(path: str | Path, *, need_weights: bool = True) -> Path:
    """Return ``path`` as a Path if it holds a model; ModelLoadError says what is missing and the fix."""
    directory = Path(path).expanduser()
    hint = MAKE_HINT.format(path=path)
    if not directory.exists():
        raise ModelLoadError(f"model directory {str(path)!r} does not exist; {hint}")
    if not directory.is_dir():
        raise ModelLoadError(
            f"model path {str(path)!r} is a file, not a directory; point model.path at the directory holding "
            "config.json"
        )
    if not (directory / "config.json").is_file():
        raise ModelLoadError(
            f"model directory {str(path)!r} has no config.json, so it is not a Hugging Face model; {hint}"
        )
    if need_weights and not any(next(directory.glob(p), None) for p in _WEIGHT_PATTERNS):
        raise ModelLoadError(
            f"model directory {str(path)!r} has no weights (*.safetensors or pytorch_model*.bin); {hint}"
        )
    return directory


def load_tokenizer(path: str | Path, *, require_chat_template: bool = True) -> Any:
    """Load the tokenizer of a local model directory (ModelLoadError/TemplateError with the fix)."""
    from transformers import AutoTokenizer

    directory = check_model_dir(path, need_weights=False)
    if not any((directory / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelLoadError(
            f"model directory {str(path)!r} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}); save the tokenizer "
            "there with tokenizer.save_pretrained(DIR)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the tokenizer from {str(path)!r}: {exc}") from exc
    if require_chat_template and not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"the tokenizer in {str(path)!r} has no chat template; add one (tokenizer.chat_template = ...; "
            "save_pretrained) or use a model made by `agentrl make-model`"
        )
    return tokenizer


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ModelLoadError for cuda without a GPU."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("model.device is 'cuda' but no CUDA device is available; set model.device: cpu (or auto)")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` -> bfloat16 on CUDA, float32 on CPU; ``bfloat16_if_fast`` -> bfloat16 where ``device`` computes
    it in hardware (``agentrl.models.precision``), else float32; else the named torch dtype."""
    import torch

    from agentrl.models.precision import has_fast_bf16

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype == "bfloat16_if_fast":
        return torch.bfloat16 if has_fast_bf16(device) else torch.float32
    return getattr(torch, dtype)


def load_model(path: str | Path, *, device: str = "cpu", dtype: Any = None) -> Any:
    """Load a causal LM from a local directory onto ``device`` (ModelLoadError with the fix)."""
    import torch
    from transformers import AutoModelForCausalLM

    directory = check_model_dir(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(directory), dtype=dtype or torch.float32, local_files_only=True
        )
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load a causal LM from {str(path)!r}: {exc}") from exc
    return model.to(device)


def load_model_and_tokenizer(model_cfg: ModelConfig) -> tuple[Any, Any]:
    """Load the policy model and tokenizer named by ``model_cfg`` (device and dtype resolved)."""
    device = resolve_device(model_cfg.device)
    tokenizer = load_tokenizer(model_cfg.path)
    model = load_model(model_cfg.path, device=device, dtype=resolve_dtype(model_cfg.dtype, device))
    return model, tokenizer


def set_activation_checkpointing(lm: Any, enabled: bool) -> None:
    """Recompute each layer's activations in the backward pass (or stop); the API of transformers 5 or 4."""
    if enabled:
        if hasattr(lm, "activation_checkpointing_enable"):  # the name transformers 5 uses
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(lm, "activation_checkpointing_disable"):
        lm.activation_checkpointing_disable()
    else:
        lm.gradient_checkpointing_disable()
