"""The embedded engine sampling from the trainer's own parameters (``share_trainer_weights``): the model is held
once, an optimizer step is what the engine samples from next, exactly as a copied update would be, and a job only
shares where the trainer never updates while the engine samples."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from engine_harness import build_embedded, reference_logprobs

from agentrl.engines.base import SamplingParams
from agentrl.engines.transport import SharedStorageTransport, StateDictTransport
from agentrl.errors import EngineError
from agentrl.job.run_config import RunConfig
from agentrl.trainer.distributed import DistInfo
from agentrl.trainer.sync import session_transport

PROMPT = [4, 8, 15, 16, 23, 42]
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)


def _trainer_model(model_dir: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).train()


def _optimizer_step(lm: torch.nn.Module) -> None:
    """One real AdamW step on a language-modelling loss: parameters change in place, as the trainer's do."""
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    ids = torch.tensor([PROMPT * 3])
    lm(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _storages(*models: torch.nn.Module) -> int:
    """Bytes of the distinct storages the models' parameters live in."""
    seen = {}
    for model in models:
        for param in model.parameters():
            storage = param.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def test_the_engine_samples_each_optimizer_step_from_one_copy_of_the_weights(tiny_model_dir: Path) -> None:
    shared, copied = build_embedded(tiny_model_dir), build_embedded(tiny_model_dir)
    lm = _trainer_model(tiny_model_dir)
    engine_bytes = _storages(shared.runner.model)
    assert _storages(shared.runner.model, lm) > 1.9 * engine_bytes  # two copies before sharing

    async def body() -> None:
        before = await shared.generate(PROMPT, GREEDY)
        await shared.share_weights(lm, version=0)
        assert _storages(shared.runner.model, lm) == engine_bytes  # the trainer's own copy is gone
        _optimizer_step(lm)  # in place, into the engine's storage
        await shared.share_weights(lm, version=1)  # a sync: nothing copied, the version moves
        await copied.update_weights({k: v.clone() for k, v in lm.state_dict().items()}, version=1)
        after_shared = await shared.generate(PROMPT, GREEDY)
        after_copied = await copied.generate(PROMPT, GREEDY)
        assert shared.weight_version == 1 and after_shared.token_versions() == [1] * 12
        assert after_shared.output_ids == after_copied.output_ids  # the same policy as a copied update...
        assert after_shared.logprobs == after_copied.logprobs  # ...bit for bit
        assert after_shared.output_ids != before.output_ids or after_shared.logprobs != before.logprobs
        trainer_view = reference_logprobs(lm.eval(), PROMPT, after_shared.output_ids, temperature=1.0)
        assert torch.allclose(torch.tensor(after_shared.logprobs), trainer_view, atol=1e-4)

    try:
        asyncio.run(body())
    finally:
        asyncio.run(shared.close())
        asyncio.run(copied.close())


def test_a_trainer_checkpoint_of_shared_weights_reloads_exactly(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The trainer's q/k/v (and gate/up) then view one fused buffer per layer; a saved model must still hold
    every tensor with its own values (the checkpoint writes the state dict as ``save_checkpoint`` does)."""
    engine, lm = build_embedded(tiny_model_dir), _trainer_model(tiny_model_dir)
    try:
        asyncio.run(engine.share_weights(lm, version=0))
        _optimizer_step(lm)
        state = {k: v.cpu() for k, v in lm.state_dict().items()}
        lm.save_pretrained(tmp_path / "model", state_dict=dict(state), safe_serialization=True)  # drops tied twins
        reloaded = _trainer_model(tmp_path / "model").state_dict()
        assert reloaded.keys() == state.keys()
        assert all(torch.equal(reloaded[k], state[k]) for k in state)
    finally:
        asyncio.run(engine.close())


def test_sharing_refuses_another_dtype_and_changes_nothing(tiny_model_dir: Path) -> None:
    engine, lm = build_embedded(tiny_model_dir), _trainer_model(tiny_model_dir, torch.bfloat16)
    pointers = [p.data_ptr() for p in lm.parameters()]
    try:
        with pytest.raises(EngineError, match="same dtype and device.*share_trainer_weights: false"):
            asyncio.run(engine.share_weights(lm, version=3))
        assert [p.data_ptr() for p in lm.parameters()] == pointers and engine.weight_version == 0
        assert asyncio.run(engine.generate(PROMPT, GREEDY)).finish_reason == "length"  # still serving
    finally:
        asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("overrides", "shares"),
    [
        ({}, True),  # sync, embedded, float32: the default shares
        ({"trainer": {"mode": "async"}}, False),  # the update runs while the engine samples
        ({"engine": {"kind": "embedded", "share_trainer_weights": False}}, False),
        ({"model": {"path": "unused", "dtype": "bfloat16"}}, False),  # the trainer's master weights are float32
    ],
)
def test_a_job_shares_only_where_the_trainer_never_updates_during_sampling(
    overrides: dict, shares: bool, tmp_path: Path
) -> None:
    base = {"model": {"path": "unused", "dtype": "float32"}, "env": {"id": "agentrl/GuessNumber-v0"}}
    cfg = RunConfig.model_validate({**base, **overrides})
    transport = session_transport(cfg, tmp_path, DistInfo())
    assert isinstance(transport, SharedStorageTransport if shares else StateDictTransport)
    two_ranks = DistInfo(rank=0, world_size=2, enabled=True)
    assert not isinstance(session_transport(cfg, tmp_path, two_ranks), SharedStorageTransport)


def test_the_shared_transport_names_an_engine_that_cannot_share() -> None:
    class CopyOnly:
        async def update_weights(self, source: object, version: int) -> None: ...

    with pytest.raises(EngineError, match="CopyOnly cannot sample from the trainer's parameters"):
        asyncio.run(SharedStorageTransport().deliver(CopyOnly(), None, {}, 1, is_main=True))  # type: ignore[arg-type]
