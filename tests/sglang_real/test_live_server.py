"""The SGLang backend against SGLang 0.5.23's real server (``python -m sglang.launch_server --device cpu``, from
.venv-sglang) on a tiny float32 llama model: every reply field the client parses, logprob semantics at T != 1
against the trainer's recompute, partial rollouts cut at a step boundary and resumed, weight sync from disk and
as tensors (the latter inside SGLang's weight-update session), sglang-router over two real servers, and a
restarted server detected. One server is shared by the module (~40 s to launch); the router test adds one.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch
from live_server import (
    LiveServer,
    get_json,
    live_servers,
    make_llama_model,
    post,
    require_live_sglang,
    scheduler_gauges,
)
from rollout_test_envs import Scratchpad
from router_process import start_router

from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.engines.sglang.wire import parse_reply
from agentrl.errors import EngineError
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator

pytestmark = pytest.mark.slow
PROMPT = [5, 17, 99, 230, 7, 64, 12]
# fp32 on both sides, different kernels (SGLang's torch_native attention vs transformers' sdpa) and summation
# orders: the measured gap is ~1e-6; 1e-4 is the bound for SGLang vs an fp32 recompute
# (docs/engines.md#what-an-engines-logprobs-mean).
LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _live_sglang() -> None:
    require_live_sglang()  # before the model is built: skip (or fail under CI) at once


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_llama_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def llama_tokenizer(llama_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(llama_dir)


@pytest.fixture(scope="module")
def server(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The module's real server: float32 (exact logprob comparisons), at most 2 running requests (so a third
    one queues and a queued abort can be seen)."""
    with live_servers(llama_dir, tmp_path_factory.mktemp("sglang-logs"), max_running_requests=2) as servers:
        yield servers[0]


def _client(url: str, tmp_path: Path, **overrides: Any) -> SGLangEngine:
    return SGLangEngine(SGLangEngineConfig(urls=[url], weights_dir=str(tmp_path / "weights"), **overrides))


def _recompute(model_dir: Path | torch.nn.Module, prompt: list[int], output: list[int], temperature: float):
    """The trainer's recompute: log_softmax(fp32 logits / T) of each sampled token."""
    from transformers import AutoModelForCausalLM

    model = model_dir
    if isinstance(model_dir, Path):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(1, torch.tensor(output)[:, None]).squeeze(1)


def test_reply_fields_of_the_real_server_parse(server: LiveServer) -> None:
    """Every field the client reads, as the real server sends it (raw JSON first, then the client's parse)."""
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "ignore_eos": True},
        "return_logprob": True,
        "rid": "a" * 32,
    }
    status, raw = post(server.url + "/generate", body)
    assert status == 200, raw
    reply = json.loads(raw)
    meta = reply["meta_info"]
    assert meta["weight_version"] == "0" and meta["weight_versions"] == [{"version": "0", "start": 0, "end": 6}]
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 6 and meta["id"] == "a" * 32
    triples = meta["output_token_logprobs"]
    assert [t[1] for t in triples] == reply["output_ids"] and all(t[2] is None for t in triples)
    assert all(isinstance(t[0], float) and t[0] <= 0 for t in triples) and isinstance(reply["text"], str)
    parsed = parse_reply(reply, request_id="a" * 32, prompt_len=len(PROMPT), source=server.url)
    assert parsed.output_ids == reply["output_ids"] and parsed.logprobs == [t[0] for t in triples]
    assert parsed.token_versions() == [0] * 6 and parsed.finish_reason == "length"

    stop_id = reply["output_ids"][0]  # a stop token id: finish_reason stop, matched is the int id, kept in output
    greedy = {"max_new_tokens": 6, "temperature": 0.0, "stop_token_ids": [stop_id]}
    status, raw = post(server.url + "/generate", {**body, "sampling_params": greedy, "rid": "b" * 32})
    stop_reply = json.loads(raw)
    ids = stop_reply["output_ids"]
    if stop_id in ids:
        assert stop_reply["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop_id}
        assert ids[-1] == stop_id
        assert parse_reply(stop_reply, request_id="b", prompt_len=7, source="").matched_stop == stop_id

    for path, payload in (("/abort_request", {"rid": "nothing-runs"}), ("/abort_request", {"abort_all": True})):
        status, raw = post(server.url + path, payload)
        assert status == 200 and not raw.strip().startswith(b"{"), (path, raw)  # not JSON: the client copes
    # SGLang refuses a flush (400, plain text) until its scheduler is fully idle, and the batch of the reply above
    # can still count as its last one for a moment (CI saw one refusal): retry for a while, as a client would
    deadline = time.monotonic() + 30
    status, raw = post(server.url + "/flush_cache", {})
    while status == 400 and raw.strip() == b"Flush cache failed." and time.monotonic() < deadline:
        time.sleep(0.2)
        status, raw = post(server.url + "/flush_cache", {})
    assert status == 200 and not raw.strip().startswith(b"{"), raw


async def _generate_raw(session: aiohttp.ClientSession, url: str, rid: str, n: int) -> dict[str, Any]:
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": n, "temperature": 1.0, "ignore_eos": True},
        "return_logprob": True,
        "rid": rid,
    }
    async with session.post(url + "/generate", json=body) as resp:
        assert resp.status == 200
        return await resp.json()


def test_aborts_of_running_and_queued_requests(server: LiveServer) -> None:
    """abort_all: the 2 running requests return their partial tokens with logprobs; the queued one returns the
    real server's queued-abort shape (no prompt_tokens, no tokens) and parses as 0 tokens."""

    async def scenario() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            rids = [f"{i:032x}" for i in range(3)]
            tasks = [asyncio.ensure_future(_generate_raw(session, server.url, r, 3000)) for r in rids]
            deadline = time.monotonic() + 60
            while scheduler_gauges(server.url)["num_running_reqs"] < 2:
                assert time.monotonic() < deadline, "the real server never ran 2 requests"
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # a few tokens each
            await asyncio.to_thread(post, server.url + "/abort_request", {"abort_all": True})
            return await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)

    replies = asyncio.run(scenario())
    kinds = [r["meta_info"]["finish_reason"]["type"] for r in replies]
    assert kinds == ["abort"] * 3
    queued = [r for r in replies if r["meta_info"]["finish_reason"].get("message") == "Abort in waiting queue"]
    running = [r for r in replies if r not in queued]
    assert len(queued) == 1 and len(running) == 2
    assert "prompt_tokens" not in queued[0]["meta_info"] and queued[0]["output_ids"] == []
    q = parse_reply(queued[0], request_id="q", prompt_len=len(PROMPT), source=server.url)
    assert q.output_ids == [] and q.logprobs == [] and q.prompt_tokens == len(PROMPT)
    for reply in running:
        parsed = parse_reply(reply, request_id="r", prompt_len=len(PROMPT), source=server.url)
        assert 0 < len(parsed.output_ids) < 3000 and len(parsed.logprobs) == len(parsed.output_ids)


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_logprobs_are_tempered_full_vocabulary(server: LiveServer, llama_dir: Path, temperature: float) -> None:
    """SGLang's default logprob of a sampled token is log_softmax(logits / T) over the whole vocabulary
    (``srt/layers/sampler.py``; not with SGLANG_RETURN_ORIGINAL_LOGPROB=1, which returns it before T), so the
    trainer's fp32 recompute matches within LOGPROB_TOL."""
    client = _client(server.url, llama_dir)
    sampling = SamplingParams(max_new_tokens=24, temperature=temperature, ignore_eos=True)

    async def body() -> list[Any]:
        results = await asyncio.gather(*(client.generate(PROMPT[: 3 + i], sampling) for i in range(3)))
        await client.close()
        return results

    for i, result in enumerate(asyncio.run(body())):
        ref = _recompute(llama_dir, PROMPT[: 3 + i], result.output_ids, temperature)
        gap = (torch.tensor(result.logprobs) - ref).abs().max().item()
        untempered = _recompute(llama_dir, PROMPT[: 3 + i], result.output_ids, 1.0)
        assert gap <= LOGPROB_TOL, f"max |server - recompute| = {gap}"
        assert (torch.tensor(result.logprobs) - untempered).abs().max().item() > 100 * LOGPROB_TOL


def _orchestrator(engine: Any, tokenizer: Any, buffer: RolloutBuffer) -> RolloutOrchestrator:
    cfg = RolloutConfig(group_size=2, prompts_per_step=2, max_new_tokens=64, max_episode_tokens=700, over_sample=2.0)
    # The long tasks' first turn is as short as the others': when the short groups complete, every long episode has
    # stepped once and is mid-way through a long reply, however loaded the machine (a cut while every long turn sat
    # in the server's queue kept no tokens, under a test suite beside a training run)
    long = {"long_tasks": ("task-1", "task-2"), "long_reply_tokens": 48, "reply_tokens": 4, "long_from_turn": 1}
    env = lambda: Scratchpad(num_tasks=4, **long)  # noqa: E731
    dataset = TaskDataset.from_env(env(), epochs=1)
    return RolloutOrchestrator(engine, env, tokenizer, cfg, dataset=dataset, buffer=buffer)


def test_partial_rollouts_cut_at_a_step_boundary_resume_after_a_weight_update(
    server: LiveServer, llama_dir: Path, llama_tokenizer: Any, tmp_path: Path
) -> None:
    """Over-sampled episodes still generating when step 1 fills are aborted on the real server and kept
    (tokens, logprobs, versions); step 2, after a weight update, continues them token for token."""
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).state_dict()

    async def scenario() -> None:
        engine = _client(server.url, tmp_path)
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, llama_tokenizer, buffer)
        aborted_before = scheduler_gauges(server.url).get("num_aborted_requests_total", 0.0)  # absent before any abort
        await orch.collect_step(1)
        orch.commit_step(1)
        # The server counted the cut requests as aborted; its queue gauge is not read: SGLang 0.5.23 leaves it
        # stale (2 queued, for good) when the scheduler idles after aborting queued requests
        aborted = scheduler_gauges(server.url)["num_aborted_requests_total"] - aborted_before
        stored = [copy.deepcopy(e) for g in buffer.load_groups(("inflight",)) for e in g.episodes]
        # an in-flight group holds its cut episodes and the ones that had already finished
        cut = [e for e in stored if e.turns and e.turns[-1].reward is None]
        assert any(e.turns[-1].num_tokens > 0 for e in cut)
        assert {e.turns[-1].finish_reason for e in cut if e.turns[-1].num_tokens} == {"abort"}  # the server's word
        assert aborted >= sum(1 for e in cut if e.turns[-1].num_tokens), aborted
        await engine.update_weights(state, version=1)
        batch = await orch.collect_step(2)
        finals = {e.episode_id: e for g in batch.groups for e in g}
        continued = 0
        for before in stored:
            b, a = before.segment, finals[before.episode_id].segment
            n = len(b.completion_ids)
            assert a.input_ids[: len(b.input_ids)] == b.input_ids
            assert a.logprobs[:n] == b.logprobs and a.versions[:n] == b.versions
            if before in cut:  # whatever it samples after the cut is the new weights' (a turn cut at its last token
                # has nothing left to sample: the env answers it in step 2)
                sampled_after = {v for v, m in zip(a.versions[n:], a.loss_mask[n:]) if m}
                assert sampled_after <= {1}
                continued += sampled_after == {1}
            else:  # finished before the cut: kept as it was
                assert a.input_ids == b.input_ids
        assert continued, "no cut episode sampled on after the weight update"
        await orch.close()
        await engine.close()

    asyncio.run(scenario())


def _perturbed(llama_dir: Path, scale: float, seed: int) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)
    return model


def test_weight_sync_disk_then_tensor_with_versions(server: LiveServer, llama_dir: Path, tmp_path: Path) -> None:
    """Both weight paths load what the trainer holds (the server's logprobs then match a recompute on the new
    weights) and every reply carries the new version. The tensor path failed with HTTP 400 before the client
    opened SGLang's weight-update session."""
    disk_model, tensor_model = _perturbed(llama_dir, 0.05, 1), _perturbed(llama_dir, 0.05, 2)
    greedy = SamplingParams(max_new_tokens=10, temperature=1.0, ignore_eos=True)
    disk, tensor = _client(server.url, tmp_path), _client(server.url, tmp_path, weight_transfer="tensor")

    async def body() -> list[Any]:
        await disk.update_weights(disk_model.state_dict(), version=5)
        after_disk = await disk.generate(PROMPT, greedy)
        await tensor.update_weights(tensor_model.state_dict(), version=6)
        after_tensor = await tensor.generate(PROMPT, greedy)
        await disk.close()
        await tensor.close()
        return [after_disk, after_tensor]

    after_disk, after_tensor = asyncio.run(body())
    assert after_disk.token_versions() == [5] * 10 and after_tensor.token_versions() == [6] * 10
    for model, result in ((disk_model, after_disk), (tensor_model, after_tensor)):
        ref = _recompute(model, PROMPT, result.output_ids, 1.0)
        assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= LOGPROB_TOL
    assert get_json(server.url + "/model_info")[1]["weight_version"] == "6"


def test_router_over_two_real_servers(server: LiveServer, llama_dir: Path, tmp_path: Path) -> None:
    """sglang-router 0.3.2 in front of the module's server and a second one: generation through the router,
    step-boundary aborts and weight updates reaching both workers (the router has neither route)."""
    # the weight tests left the module's server at version 6: back to the base weights at version 0, as the
    # second server starts (servers on different versions are refused at probe time)
    status, raw = post(server.url + "/update_weights_from_disk", {"model_path": str(llama_dir), "weight_version": "0"})
    assert status == 200, raw
    with live_servers(llama_dir, tmp_path, max_running_requests=2) as (second,):
        router, url = start_router([server.url, second.url])
        try:
            client = _client(url, tmp_path)
            long = SamplingParams(max_new_tokens=3000, ignore_eos=True)

            async def body() -> list[Any]:
                lines = await client.probe()
                await client.update_weights(str(llama_dir), version=9)
                tasks = [asyncio.ensure_future(client.generate(PROMPT + [i], long)) for i in range(4)]
                await asyncio.sleep(3)
                await client.abort(None)
                results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
                await client.close()
                return [lines, results]

            lines, results = asyncio.run(body())
            versions = [get_json(worker + "/model_info")[1]["weight_version"] for worker in (server.url, second.url)]
        finally:
            router.terminate()
            router.wait(timeout=30)
    assert versions == ["9", "9"]
    assert any("sglang-router over 2 worker(s)" in line for line in lines)
    assert all(r.finish_reason == "abort" and len(r.output_ids) < 3000 for r in results)
    assert all(set(r.token_versions()) <= {9} for r in results)


def test_a_restarted_server_is_detected(server: LiveServer, llama_dir: Path, tmp_path: Path) -> None:
    """Late in the module: the server restarts (back at --weight-version 0) behind a client at version 6+;
    the next reply's version is older than the policy's, which is an error naming the cause."""
    client = _client(server.url, tmp_path)

    async def before() -> int:
        await client.generate(PROMPT, SamplingParams(max_new_tokens=2))
        return client.weight_version

    version = asyncio.run(before())
    assert version > 0  # set by the weight-update tests before this one
    server.kill()
    server.start()

    async def after() -> None:
        try:
            await client.generate(PROMPT, SamplingParams(max_new_tokens=2))
        finally:
            await client.close()

    with pytest.raises(EngineError, match="restarted or missed a weight update"):
        asyncio.run(after())


def _bench_client(url: str, model_dir: Path, out: Path) -> dict[str, Any]:
    """SGLang's own benchmark client, --backend sglang with its default flags; only the data is local (random
    token ids instead of ShareGPT, which it would download) and small."""
    cmd = [str(require_live_sglang()), "-m", "sglang.benchmark.serving", "--backend", "sglang", "--base-url", url]
    cmd += ["--model", str(model_dir), "--tokenizer", str(model_dir), "--dataset-name", "random-ids"]
    cmd += ["--num-prompts", "8", "--random-input-len", "32", "--random-output-len", "16", "--output-file", str(out)]
    cmd += ["--random-range-ratio", "1"]  # exactly 16 tokens each (the default 0 draws each length from 1..16)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text().splitlines()[-1])


def test_sglangs_benchmark_client_against_the_real_server_and_agentrl_serve(
    server: LiveServer, llama_dir: Path, tmp_path: Path
) -> None:
    """The same command (streaming by default) completes every request against both servers."""
    from test_rollout_http import _serve

    real = _bench_client(server.url, llama_dir, tmp_path / "real.jsonl")
    proc, url = _serve(llama_dir)
    try:
        ours = _bench_client(url, llama_dir, tmp_path / "ours.jsonl")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for result in (real, ours):
        assert result["completed"] == 8 and result["total_output_tokens"] == 8 * 16, result
    print({k: (real[k], ours[k]) for k in ("output_throughput", "mean_ttft_ms", "mean_e2e_latency_ms")})
