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


def _named_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters by canonical name, tied twins under each of their names."""
    return {_canonical(n): p for n, p in model.named_parameters(remove_duplicate=False)}


def _storage_problem(ours: torch.Tensor, theirs: torch.Tensor, name: str) -> str | None:
    if tuple(ours.shape) != tuple(theirs.shape):
        return f"weight {name!r} has shape {tuple(theirs.shape)}, the engine's {tuple(ours.shape)}"
    if ours.dtype != theirs.dtype or ours.device != theirs.device:
        return (
            f"weight {name!r} is {theirs.dtype} on {theirs.device}, the engine's {ours.dtype} on {ours.device}; "
            "sharing needs the same dtype and device (set the engine's share_trainer_weights: false to copy)"
        )
    return None


def share_storage(model: torch.nn.Module, trainer_model: torch.nn.Module) -> int:
    """Make ``trainer_model``'s parameters use ``model``'s storage, after copying their values into it.

    From then on the engine samples from whatever the trainer's optimizer writes in place: one copy of the
    weights in memory and nothing to copy at a weight sync. The trainer adopts the engine's tensors (not the
    reverse) because the engine's lean forward has fused q/k/v and gate/up into one buffer per layer, which
    the trainer's parameters then view. Idempotent: a second call checks the storage is still shared and
    copies nothing. Raises EngineError when names, shapes, dtypes or devices differ, changing nothing.
    Only for a trainer that never updates while the engine samples (trainer.mode sync, one process).
    """
    ours, theirs = _named_weights(model), _named_weights(trainer_model)
    if set(ours) != set(theirs):
        odd = sorted(set(ours) ^ set(theirs))
        raise EngineError(
            f"the trainer's model and the engine's differ in {len(odd)} parameter name(s), e.g. {odd[:3]}; "
            "share weights only between two loads of the same architecture"
        )
    problems = [p for n in ours if (p := _storage_problem(ours[n], theirs[n], n)) is not None]
    if problems:
        raise EngineError(f"cannot share the trainer's weights: {problems[0]}")
    if all(ours[n].data_ptr() == theirs[n].data_ptr() for n in ours):
        return 0
    with torch.inference_mode(False), torch.no_grad():  # parameters must stay normal tensors
        for name, target in ours.items():
            if target.data_ptr() != theirs[name].data_ptr():
                target.copy_(theirs[name])
                theirs[name].data = target.data
    return len(ours)
