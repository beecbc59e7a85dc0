"""Weight updates: in-place copy from a state dict or a safetensors directory, version bookkeeping,
and what happens to requests in flight (finish on the old weights, or abort)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_harness import ServedEngine, build_embedded, reference_logprobs, run_async, wait_running

from agentrl.engines.base import GenerateResult, SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.engines.weight_dirs import version_dir
from agentrl.errors import EngineConfigError, EngineError

PROMPT = [4, 8, 15, 16, 23, 42]
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
LONG = SamplingParams(max_new_tokens=300, ignore_eos=True)


@pytest.fixture(scope="module")
def perturbed(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    """The tiny model with noisy weights, in memory and saved as a safetensors directory."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    out = tmp_path_factory.mktemp("perturbed")
    model.save_pretrained(out, safe_serialization=True)
    return model, out


def _assert_matches(model: torch.nn.Module, result: GenerateResult, temperature: float = 1.0) -> None:
    ref = reference_logprobs(model, PROMPT, result.output_ids, temperature)
    assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= 1e-4


def test_state_dict_update_changes_outputs_and_version(embedded: Any, perturbed: tuple[torch.nn.Module, Path]) -> None:
    model, _ = perturbed
    state = {k: v.clone() for k, v in model.state_dict().items()}

    async def body() -> GenerateResult:
        await embedded.update_weights(state, version=3)
        return await embedded.generate(PROMPT, GREEDY)

    result = run_async(embedded, body)
    assert embedded.weight_version == 3 and result.token_versions() == [3] * 12
    _assert_matches(model, result)


def test_directory_update_over_both_backends(engine: Any, perturbed: tuple[torch.nn.Module, Path]) -> None:
    model, directory = perturbed

    async def body() -> GenerateResult:
        await engine.update_weights(str(directory), version=2)
        return await engine.generate(PROMPT, GREEDY)

    result = run_async(engine, body)
    assert engine.weight_version == 2 and result.token_versions() == [2] * 12
    _assert_matches(model, result)


def test_finish_old_lets_running_requests_finish_on_old_weights(
    embedded: Any, perturbed: tuple[torch.nn.Module, Path]
) -> None:
    model, _ = perturbed

    async def body() -> tuple[GenerateResult, GenerateResult]:
        running = asyncio.ensure_future(embedded.generate(PROMPT, LONG))
        await wait_running(embedded, 1)
        update = asyncio.ensure_future(embedded.update_weights(model.state_dict(), version=1))
        await asyncio.sleep(0.01)
        later = asyncio.ensure_future(embedded.generate(PROMPT, GREEDY))  # queued behind the drain
        old = await running
        await update
        return old, await later

    old, new = run_async(embedded, body)
    assert old.finish_reason == "length" and old.token_versions() == [0] * 300
    assert new.token_versions() == [1] * 12
    _assert_matches(model, new)


def test_abort_mode_returns_partial_output_of_old_version(
    tiny_model_dir: Path, perturbed: tuple[torch.nn.Module, Path]
) -> None:
    model, _ = perturbed
    engine = build_embedded(tiny_model_dir, on_weight_update="abort")

    async def body() -> tuple[GenerateResult, GenerateResult]:
        running = asyncio.ensure_future(engine.generate(PROMPT, SamplingParams(max_new_tokens=2000, ignore_eos=True)))
        await wait_running(engine, 1)
        await engine.update_weights(model.state_dict(), version=1)
        return await running, await engine.generate(PROMPT, GREEDY)

    try:
        old, new = run_async(engine, body)
    finally:
        asyncio.run(engine.close())
    assert old.finish_reason == "abort" and 0 < len(old.output_ids) < 2000
    assert set(old.token_versions()) == {0} and new.token_versions() == [1] * 12


def test_bad_state_dicts_are_refused(embedded: Any) -> None:
    good = {k: v.clone() for k, v in embedded.runner.model.state_dict().items()}
    unknown = {**good, "model.extra.weight": torch.zeros(2)}
    wrong_shape = {**good, "model.norm.weight": torch.zeros(3)}
    missing = {k: v for k, v in good.items() if "layers.0.mlp" not in k}
    for bad, message in ((unknown, "lacks"), (wrong_shape, "shape"), (missing, "misses")):
        with pytest.raises(EngineError, match=message):
            run_async(embedded, lambda bad=bad: embedded.update_weights(bad, version=5))
    assert embedded.weight_version == 0
    with pytest.raises(EngineError, match="safetensors"):
        run_async(embedded, lambda: embedded.update_weights("/nonexistent/weights", version=5))
    # wrapper prefixes from torch.compile / DDP are accepted
    run_async(embedded, lambda: embedded.update_weights({f"_orig_mod.{k}": v for k, v in good.items()}, version=6))
    assert embedded.weight_version == 6


def test_sglang_client_writes_state_dict_to_weights_dir(
    tiny_model_dir: Path, perturbed: tuple[torch.nn.Module, Path], tmp_path: Path
) -> None:
    model, _ = perturbed
    inner = build_embedded(tiny_model_dir)
    try:
        with ServedEngine(inner) as served:
            no_dir = SGLangEngine(SGLangEngineConfig(urls=[served.url]))
            with pytest.raises(EngineConfigError, match="weights_dir"):
                run_async(no_dir, lambda: no_dir.update_weights(model.state_dict(), version=1))
            client = SGLangEngine(SGLangEngineConfig(urls=[served.url], weights_dir=str(tmp_path)))

            async def body() -> GenerateResult:
                await client.update_weights(model.state_dict(), version=1)
                return await client.generate(PROMPT, GREEDY)

            result = run_async(client, body)
    finally:
        asyncio.run(inner.close())
    assert inner.weight_version == 1 and result.token_versions() == [1] * 12
    assert (version_dir(tmp_path, 1) / "model.safetensors").is_file()
    _assert_matches(model, result)


def test_sglang_client_sends_tensors_when_colocated(
    tiny_model_dir: Path, perturbed: tuple[torch.nn.Module, Path]
) -> None:
    model, _ = perturbed
    inner = build_embedded(tiny_model_dir)
    try:
        with ServedEngine(inner) as served:
            client = SGLangEngine(SGLangEngineConfig(urls=[served.url], weight_transfer="tensor"))

            async def body() -> GenerateResult:
                await client.update_weights(model.state_dict(), version=7)
                return await client.generate(PROMPT, GREEDY)

            result = run_async(client, body)
    finally:
        asyncio.run(inner.close())
    assert inner.weight_version == 7 and result.token_versions() == [7] * 12
    _assert_matches(model, result)


def test_tensor_updates_need_a_weight_update_session_as_in_sglang(
    tiny_model_dir: Path, perturbed: tuple[torch.nn.Module, Path]
) -> None:
    """agentrl serve refuses /update_weights_from_tensor outside /begin_weight_update ... /end_weight_update with
    SGLang 0.5.23's HTTP 400; the client opens the session, and closes one a dead trainer left open."""
    model, _ = perturbed
    inner = build_embedded(tiny_model_dir)
    try:
        with ServedEngine(inner) as served:
            client = SGLangEngine(SGLangEngineConfig(urls=[served.url], weight_transfer="tensor"))

            async def body() -> tuple[Any, ...]:
                http = client.http
                bare = await http.call("POST", served.url, "/update_weights_from_tensor", {"weight_version": "3"})
                stray_end = await http.call("POST", served.url, "/end_weight_update", {})
                left_open = await http.call("POST", served.url, "/begin_weight_update", {})  # a trainer died here
                await client.update_weights(model.state_dict(), version=2)
                closed = await http.call("POST", served.url, "/end_weight_update", {})
                return bare, stray_end, left_open, closed, await client.generate(PROMPT, GREEDY)

            bare, stray_end, left_open, closed, result = run_async(client, body)
    finally:
        asyncio.run(inner.close())
    assert bare[0] == 400 and "must run between begin_weight_update() and end_weight_update()" in bare[1]["message"]
    assert stray_end[0] == 400 and left_open == (200, {"success": True, "message": "Success"})
    assert closed[0] == 400, "the client must close the session it opened"
    assert inner.weight_version == 2 and result.token_versions() == [2] * 12
    _assert_matches(model, result)
