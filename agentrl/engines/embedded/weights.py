"""Weight sync into a live model: copy a state dict (or safetensors files) into its parameters.

Copying in place (``Tensor.copy_``) keeps every tensor the engine holds valid and needs no reload;
tied weights (e.g. ``lm_head`` = ``embed_tokens``) are filled from whichever name the source has.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from agentrl.errors import EngineError

_WRAPPER_PREFIXES = ("_orig_mod.", "module.", "_fsdp_wrapped_module.")


def load_safetensors_dir(path: str | Path) -> dict[str, torch.Tensor]:
    """Read every ``*.safetensors`` file of a Hugging Face model directory into one state dict."""
    from safetensors.torch import load_file

    directory = Path(path)
    files = sorted(directory.glob("*.safetensors")) if directory.is_dir() else []
    if not files:
        raise EngineError(
            f"no *.safetensors files in weights directory {str(directory)!r}; save the model there with "
            "save_pretrained(dir, safe_serialization=True)"
        )
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def _canonical(name: str) -> str:
    """Strip wrapper prefixes that torch.compile / DDP / FSDP add to parameter names."""
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    return name.replace("._orig_mod.", ".").replace("._fsdp_wrapped_module.", ".")


def copy_state_dict(model: torch.nn.Module, source: Mapping[str, torch.Tensor]) -> int:
    """Copy ``source`` into ``model`` in place; returns how many tensors were copied.

    Raises EngineError when a source name is unknown, a shape differs, or a model weight is not
    covered (directly or through a tied twin).
    """
    targets = model.state_dict()
    unknown = [name for name in source if _canonical(name) not in targets]
    if unknown:
        raise EngineError(
            f"weight update has {len(unknown)} tensor(s) the engine's model lacks, e.g. {unknown[:3]}; send the state "
            "dict of the same architecture"
        )
    pairs = []
    for name, tensor in source.items():  # validate everything first: a refused update changes nothing
        target = targets[_canonical(name)]
        value = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # FSDP2 DTensor
        if tuple(value.shape) != tuple(target.shape):
            raise EngineError(
                f"weight {name!r} has shape {tuple(value.shape)}, the engine expects {tuple(target.shape)}"
            )
        pairs.append((target, value))
    covered = {target.data_ptr() for target, _ in pairs}
    # parameters must be covered; buffers (rotary tables, ...) may keep their values
    param_names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    missing = [n for n, t in targets.items() if t.data_ptr() not in covered and n in param_names]
    if missing:
        raise EngineError(
            f"weight update misses {len(missing)} model tensor(s), e.g. {missing[:3]}; send the full state dict"
        )
    with torch.no_grad():
        for target, value in pairs:
            target.copy_(value)
    return len(pairs)
