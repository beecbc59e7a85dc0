"""SGLang's ``/update_weights_from_tensor`` payload: named tensors pickled with torch's multiprocessing
reductions (CUDA IPC handles, so same host only), base64-encoded, one per TP rank. CPU tensors are
pickled inline (fd-passing shared memory only works between related processes).

Unpickling runs arbitrary code from the sender: servers accept it only from trusted, local trainers.
"""

from __future__ import annotations

import base64
import io
import pickle
from collections.abc import Mapping
from multiprocessing.reduction import ForkingPickler

import torch

# Importing torch.multiprocessing registers the tensor reductions ForkingPickler uses.
import torch.multiprocessing

from agentrl.errors import EngineError


def serialize_named_tensors(state: Mapping[str, torch.Tensor]) -> str:
    """``[(name, tensor), ...]`` -> base64 text, as SGLang's MultiprocessingSerializer(output_str=True)."""
    pairs = [(name, tensor.detach()) for name, tensor in state.items()]
    buf = io.BytesIO()
    if any(t.is_cuda for _, t in pairs):
        ForkingPickler(buf).dump(pairs)
    else:
        torch.save(pairs, buf)  # a plain pickle with the data inline; pickle.loads reads it too
        return base64.b64encode(b"TSAVE" + buf.getvalue()).decode("ascii")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def deserialize_named_tensors(payload: str) -> dict[str, torch.Tensor]:
    """The inverse of ``serialize_named_tensors`` (copies out of the sender's shared memory)."""
    try:
        raw = base64.b64decode(payload)
        if raw.startswith(b"TSAVE"):
            pairs = torch.load(io.BytesIO(raw[5:]), weights_only=True)
        else:
            pairs = pickle.loads(raw)
    except Exception as exc:  # any unpickling failure is the sender's fault: report it, don't crash
        raise EngineError(
            f"serialized_named_tensors could not be decoded ({type(exc).__name__}: {exc}); send torch ForkingPickler "
            "output, base64-encoded"
        ) from exc
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise EngineError("serialized_named_tensors must decode to a list of (name, tensor) pairs")
    return {str(name): tensor.clone() for name, tensor in pairs}
