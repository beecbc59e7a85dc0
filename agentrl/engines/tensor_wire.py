"""SGLang's ``/update_weights_from_tensor`` payload, both directions, exactly as SGLang 0.5.x decodes it.

``serialized_named_tensors`` is a list with one entry per tensor-parallel rank; rank ``r`` decodes entry
``r`` (``srt/managers/tp_worker.py``, ``deserialize_own_rank``) with ``MultiprocessingSerializer.deserialize``
(``srt/utils/common.py``): base64 text -> a ``ForkingPickler`` pickle of ``[(name, tensor), ...]`` read by
an allow-list unpickler, then each tensor is moved to the rank's device and given to the model's
``load_weights`` (``model_runner_components/weight_updater.py``, ``update_weights_from_tensor``).

ForkingPickler shares storage instead of copying it: CUDA tensors travel as CUDA IPC handles, CPU tensors
as shared-memory file names (the ``file_system`` strategy; the default ``file_descriptor`` one needs a
socket back to a related process). Either way the receiver must run on the same host while the sender
keeps the tensors alive, which ``SharedTensors`` does until the update call has returned.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing  # registers the tensor and storage reductions ForkingPickler uses

from agentrl.errors import EngineError

# The globals a payload may name: containers, tensor/storage rebuild functions and dtypes. Anything else
# (a pickle can name any callable) is refused, as SGLang's SafeUnpickler refuses it.
_ALLOWED_MODULE_NAMES: dict[str, frozenset[str] | None] = {
    "builtins": frozenset({"list", "tuple", "dict", "str", "int", "float", "bool", "bytes"}),
    "collections": frozenset({"OrderedDict"}),
    "torch": None,  # dtypes, Size, device, storage classes: checked below to be types or dtypes
    "torch._utils": frozenset({"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_parameter"}),
    "torch._tensor": frozenset({"_rebuild_from_type_v2"}),
    "torch.storage": frozenset({"UntypedStorage", "TypedStorage"}),
    "torch.nn.parameter": frozenset({"Parameter"}),
    "torch.multiprocessing.reductions": frozenset(
        {
            "rebuild_tensor",
            "rebuild_cuda_tensor",
            "rebuild_storage_filename",
            "rebuild_storage_fd",
            "rebuild_storage_empty",
            "rebuild_typed_storage",
            "rebuild_typed_storage_child",
        }
    ),
    "multiprocessing.resource_sharer": frozenset({"DupFd"}),
}


class SharedTensors:
    """Tensors exported for one update: keeps CPU copies in shared memory alive until ``close``."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self._pairs: list[tuple[str, torch.Tensor]] = []
        for name, tensor in state.items():
            tensor = tensor.detach()
            if not tensor.is_cuda:  # a private copy: share_memory_ must not move the trainer's own storage
                tensor = tensor.clone().share_memory_()
            self._pairs.append((str(name), tensor))

    def payloads(self, ranks: int) -> list[str]:
        """One base64 payload per TP rank, each pickled on its own (CUDA IPC refcounts are per payload)."""
        if ranks < 1:
            raise EngineError(f"a server has tp_size {ranks}; expected at least 1")
        with _file_system_sharing():
            return [_dump(self._pairs) for _ in range(ranks)]

    def close(self) -> None:
        """Drop the shared copies (the receivers have opened or copied them by now)."""
        self._pairs = []


def serialize_named_tensors(state: Mapping[str, torch.Tensor], ranks: int = 1) -> tuple[SharedTensors, list[str]]:
    """``state`` -> (the keep-alive holder, one payload per TP rank). Close the holder after the update."""
    shared = SharedTensors(state)
    return shared, shared.payloads(ranks)


def deserialize_named_tensors(payload: str | bytes) -> dict[str, torch.Tensor]:
    """One rank's payload -> ``{name: tensor}`` (CPU copies of shared storage), refusing foreign globals."""
    try:
        raw = base64.b64decode(payload, validate=True) if isinstance(payload, str) else bytes(payload)
        pairs = _AllowListUnpickler(io.BytesIO(raw)).load()
    except (binascii.Error, ValueError, pickle.UnpicklingError, EOFError, RuntimeError, OSError) as exc:
        raise EngineError(
            f"serialized_named_tensors could not be decoded ({type(exc).__name__}: {exc}); send SGLang's format: "
            "base64 of a ForkingPickler pickle of [(name, tensor), ...], one entry per TP rank"
        ) from exc
    if not isinstance(pairs, list) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], torch.Tensor) for p in pairs
    ):
        raise EngineError("serialized_named_tensors must decode to a list of (name, tensor) pairs")
    return {str(name): tensor.detach().to("cpu", copy=True) for name, tensor in pairs}


def _dump(pairs: list[tuple[str, torch.Tensor]]) -> str:
    buf = io.BytesIO()
    ForkingPickler(buf).dump(pairs)
    return base64.b64encode(buf.getvalue()).decode("ascii")


@contextmanager
def _file_system_sharing() -> Iterator[None]:
    """CPU storages by shared-memory file name: an unrelated process on this host can open them."""
    previous = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        yield
    finally:
        torch.multiprocessing.set_sharing_strategy(previous)


class _AllowListUnpickler(pickle.Unpickler):
    """Unpickles tensors only: any global outside ``_ALLOWED_MODULE_NAMES`` raises UnpicklingError."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED_MODULE_NAMES.get(module, frozenset())
        if allowed is None:  # the torch namespace: only dtypes and classes (no functions such as torch.load)
            value = getattr(torch, name, None)
            if isinstance(value, (torch.dtype, type)):
                return value
        elif name in allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"payload names {module}.{name}, which a tensor payload never needs")
