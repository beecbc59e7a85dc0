"""``/update_weights_from_tensor`` payloads decoded by SGLang 0.5.23's own deserializer, one per TP rank.

The decoding process is a separate, unrelated process (as an SGLang server is): it runs
``MultiprocessingSerializer.deserialize`` (``srt/utils/common.py``: base64, then its allow-list
``SafeUnpickler``) on payload ``r`` as TP rank ``r`` does (``srt/managers/tp_worker.py``,
``deserialize_own_rank``). CPU tensors travel as shared-memory file names; on a GPU they are CUDA IPC
handles, which a CPU machine cannot create.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from sglang_install import run_sglang_python

from agentrl.engines.tensor_wire import deserialize_named_tensors, serialize_named_tensors

DECODE = """
import json, sys
from sglang.srt.utils.common import MultiprocessingSerializer
payloads = json.loads(open(sys.argv[1]).read())
out = []
for rank, payload in enumerate(payloads):
    named = MultiprocessingSerializer.deserialize(payload)  # what TP rank `rank` runs
    out.append({name: [str(t.dtype), list(t.shape), float(t.double().sum())] for name, t in named})
print(json.dumps(out))
"""


def _state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return {
        "model.embed_tokens.weight": torch.randn(64, 16, generator=gen),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(16, 16, generator=gen).to(torch.bfloat16),
        "model.norm.weight": torch.ones(16),
    }


def test_sglangs_own_deserializer_reads_every_tp_ranks_payload(tmp_path: Path) -> None:
    state = _state()
    shared, payloads = serialize_named_tensors(state, ranks=2)
    try:
        assert len(payloads) == 2 and all(isinstance(p, str) for p in payloads)
        (tmp_path / "payloads.json").write_text(json.dumps(payloads))
        decoded = json.loads(run_sglang_python(DECODE, str(tmp_path / "payloads.json")).stdout)
    finally:
        shared.close()
    want = {k: [str(v.dtype), list(v.shape), float(v.double().sum())] for k, v in state.items()}
    assert decoded == [want, want]


def test_agentrl_serve_decodes_the_same_payload_and_refuses_other_globals() -> None:
    import base64
    import pickle

    import pytest

    from agentrl.errors import EngineError

    state = _state()
    shared, payloads = serialize_named_tensors(state, ranks=1)
    try:
        decoded = deserialize_named_tensors(payloads[0])
    finally:
        shared.close()
    assert decoded.keys() == state.keys() and all(torch.equal(decoded[k], state[k]) for k in state)
    evil = base64.b64encode(pickle.dumps([("x", print)])).decode()  # names builtins.print: refused, never called
    with pytest.raises(EngineError, match="builtins.print"):
        deserialize_named_tensors(evil)
