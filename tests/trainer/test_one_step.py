"""One training step against the real embedded engine: engine logprobs as pi_old, update, weight sync."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.transport import DiskTransport, StateDictTransport
from agentrl.trainer.batch import build_rows
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.sync import sync_weights
from agentrl.trainer.update import PolicyUpdater
from agentrl.trajectory import Episode, TokenSegment, TurnRecord


async def _sample_groups(engine: object, prompts: list[list[int]], group_size: int) -> list[list[Episode]]:
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, seed=None)
    groups = []
    for g, prompt in enumerate(prompts):
        results = await asyncio.gather(*(engine.generate(prompt, sampling) for _ in range(group_size)))  # type: ignore[attr-defined]
        group = []
        for i, res in enumerate(results):
            n = len(res.output_ids)
            seg = TokenSegment(
                prompt_ids=prompt,
                completion_ids=res.output_ids,
                logprobs=res.logprobs,
                loss_mask=[1] * n,
                turn_ids=[0] * n,
                versions=res.token_versions(),
            )
            group.append(
                Episode(
                    episode_id=f"{g}-{i}",
                    task_id=str(g),
                    group_id=str(g),
                    segments=[seg],
                    turns=[TurnRecord(index=0)],
                    status="complete",
                    final_reward=float(i),
                )
            )
        groups.append(group)
    return groups


def _trainer_logprobs(lm: torch.nn.Module, prompt: list[int], output: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + output])
    select = torch.zeros(1, ids.shape[1] - 1, dtype=torch.bool)
    select[0, len(prompt) - 1 :] = True
    with torch.no_grad():
        return PolicyLogprobs(lm)(ids, select, temperature=1.0).logp_bt[select]


def test_one_step_updates_policy_and_syncs_engine(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agentrl.engines.embedded.engine import EmbeddedEngine

    async def scenario() -> None:
        engine = EmbeddedEngine.from_pretrained(tiny_model_dir, config=EmbeddedEngineConfig(seed=1))
        lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        before = copy.deepcopy(lm.state_dict())
        prompts = [[5, 17, 99, 300], [8, 40, 41]]
        try:
            groups = await _sample_groups(engine, prompts, 4)
            updater = PolicyUpdater(
                PolicyLogprobs(lm),
                AlgorithmConfig(),
                TrainerConfig(lr=1e-2, mini_batches=2),
                temperature=1.0,
                total_steps=1,
            )
            metrics = updater.update(build_rows(groups, 4, AlgorithmConfig(), current_version=0))
            assert torch.isfinite(torch.tensor(metrics["train/loss"]))
            assert metrics["train/mb0_abs_log_s_max"] < 1e-4  # engine logprobs == trainer logprobs before any update
            assert any(not torch.equal(v, before[k]) for k, v in lm.state_dict().items())
            assert engine.weight_version == 0
            await sync_weights(engine, lm, 1, transport=StateDictTransport())
            assert engine.weight_version == 1
            res = await engine.generate(prompts[0], SamplingParams(max_new_tokens=8, temperature=1.0))
            assert {s.version for s in res.version_spans} == {1}
            mine = _trainer_logprobs(lm, prompts[0], res.output_ids)
            assert torch.allclose(torch.tensor(res.logprobs), mine, atol=1e-4)
        finally:
            await engine.close()

    asyncio.run(scenario())


def test_disk_transport_writes_loadable_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agentrl.engines.embedded.engine import EmbeddedEngine

    async def scenario() -> None:
        engine = EmbeddedEngine.from_pretrained(tiny_model_dir)
        lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        with torch.no_grad():
            lm.lm_head.weight.mul_(1.5)
        try:
            await sync_weights(engine, lm, 3, transport=DiskTransport(tmp_path))
            assert engine.weight_version == 3
            assert (tmp_path / "v000003" / "model.safetensors").exists()
            res = await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=6))
            assert torch.allclose(
                torch.tensor(res.logprobs), _trainer_logprobs(lm, [5, 6, 7], res.output_ids), atol=1e-4
            )
        finally:
            await engine.close()

    asyncio.run(scenario())
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "v000003")
    assert reloaded.config.vocab_size > 0


@pytest.mark.parametrize("bad", ["none"])
def test_engine_without_logprobs_is_a_config_error(bad: str) -> None:
    from agentrl.engines.base import LogprobSemantics
    from agentrl.errors import ConfigError
    from agentrl.job.run_config import RunConfig
    from agentrl.trainer.validate import check_engine_logprobs

    cfg = RunConfig.model_validate({"model": {"path": "x"}, "env": {"id": "agentrl/MagicWord-v0"}})
    with pytest.raises(ConfigError, match="returns no logprobs; set algorithm.old_logprobs: recompute"):
        check_engine_logprobs(LogprobSemantics(bad), cfg)
    check_engine_logprobs(
        LogprobSemantics(bad), cfg.model_copy(update={"algorithm": AlgorithmConfig(old_logprobs="recompute")})
    )


@pytest.mark.parametrize("weight_transfer", ["tensor", "disk"])
def test_trainer_syncs_sglang_servers_by_tensor_or_disk(
    tiny_model_dir: Path, tmp_path: Path, weight_transfer: str
) -> None:
    """engine.weight_transfer decides the route: the served engine's logprobs are the trainer's after sync."""
    import sys

    from transformers import AutoModelForCausalLM

    from agentrl.engines.sglang.http import SGLangEngine
    from agentrl.job.loader import build_config

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))
    from engine_harness import ServedEngine, build_embedded

    cfg = build_config(
        {
            "model": {"path": str(tiny_model_dir)},
            "engine": {
                "kind": "sglang",
                "urls": ["http://127.0.0.1:1"],
                "weight_transfer": weight_transfer,
                "weights_dir": str(tmp_path),
            },
            "env": {"id": "agentrl/MagicWord-v0"},
        },
        check_env=False,
    )
    transport = cfg.engine.weight_transport(tmp_path / "run")
    expected = {"tensor": StateDictTransport(), "disk": DiskTransport(tmp_path)}[weight_transfer]
    assert transport == expected  # weights_dir, not the run directory, when it is set
    inner = build_embedded(tiny_model_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        lm.lm_head.weight.mul_(1.5)

    async def scenario(url: str) -> None:
        client = SGLangEngine(cfg.engine.model_copy(update={"urls": [url], "max_retries": 0}))
        try:
            await sync_weights(client, lm, 2, transport=transport)
            res = await client.generate([5, 6, 7], SamplingParams(max_new_tokens=6))
            assert {s.version for s in res.version_spans} == {2}
            assert torch.allclose(
                torch.tensor(res.logprobs), _trainer_logprobs(lm, [5, 6, 7], res.output_ids), atol=1e-4
            )
        finally:
            await client.close()

    with ServedEngine(inner) as served:
        asyncio.run(scenario(served.url))
    asyncio.run(inner.close())
    assert inner.weight_version == 2
    assert any(tmp_path.glob("v*/model.safetensors")) == (weight_transfer == "disk")
