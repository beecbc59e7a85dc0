"""engine.kind: vllm against a live vLLM CPU server: token-in/token-out generation, logprobs equal to the
trainer's recompute at the sampling temperature, a partial rollout cut at a step boundary and resumed, and a
weight sync whose new policy the server then samples from."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from vllm_server import VLLMServer

from agentrl.config.sections import ModelConfig
from agentrl.engines.base import GenerateResult, LogprobSemantics, SamplingParams
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.engines.vllm.http import VLLMEngine
from agentrl.engines.weight_dirs import publish_weights
from agentrl.trainer.logprobs import naive_token_logprobs

T = 0.7
# fp32 on both sides; vLLM's CPU kernels sum in another order than torch's HF forward: measured max |diff| 9.5e-7
# (printed with -s); 2e-5 leaves a 20x margin and is far below what moves a clipped ratio (clip eps >= 3e-4).
LOGPROB_TOL = 2e-5
PROMPT = [5, 17, 300, 42, 9, 77, 1024, 3, 8, 600]


def _engine(server: VLLMServer, **overrides: object) -> VLLMEngine:
    cfg = VLLMEngineConfig(urls=[server.url], request_timeout_s=300.0, **overrides)  # type: ignore[arg-type]
    return cfg.build(ModelConfig(path=str(server.model_dir)))  # type: ignore[return-value]


def _recompute(model_dir: Path, prompt: list[int], result: GenerateResult, temperature: float) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    ids = torch.tensor([prompt + result.output_ids])
    with torch.no_grad():
        logp = naive_token_logprobs(lm, ids, temperature)[0]
    return logp[len(prompt) - 1 :]


def test_generation_is_token_in_token_out_with_tempered_logprobs(vllm_server: VLLMServer) -> None:
    async def run() -> tuple[list[str], GenerateResult]:
        engine = _engine(vllm_server)
        try:
            lines = await engine.probe()
            result = await engine.generate(PROMPT, SamplingParams(max_new_tokens=24, temperature=T, ignore_eos=True))
            return lines, result
        finally:
            await engine.close()

    lines, result = asyncio.run(run())
    assert any("tempered logprobs" in line for line in lines), lines
    assert result.semantics == LogprobSemantics.TEMPERED_FULL_VOCAB
    assert result.finish_reason == "length" and len(result.output_ids) == 24 == len(result.logprobs)
    assert result.prompt_tokens == len(PROMPT)
    assert [(s.version, s.start, s.end) for s in result.version_spans] == [(0, 0, 24)]
    recomputed = _recompute(vllm_server.model_dir, PROMPT, result, T)
    diff = (recomputed - torch.tensor(result.logprobs)).abs().max().item()
    print(f"vllm tier: max |engine - trainer| logprob at T={T}: {diff:.2e} over {len(result.logprobs)} tokens")
    assert diff < LOGPROB_TOL, f"max |engine - trainer| logprob = {diff:.2e}"
    at_one = _recompute(vllm_server.model_dir, PROMPT, result, 1.0)  # raw logprobs would match this instead
    assert (at_one - torch.tensor(result.logprobs)).abs().max().item() > 100 * LOGPROB_TOL


def test_a_step_boundary_abort_keeps_the_partial_tokens_and_the_rollout_resumes(vllm_server: VLLMServer) -> None:
    # The cut lands a quarter into a 4,000-token request at this server's own speed, measured first; a retry cuts
    # sooner if the request had finished, later if it ran on past the abort (sent before the server knew it): a
    # fixed 0.5 s was too late on an idle AVX-512 CPU (2,000 tokens took less), a load gauge too slow to follow,
    # one timing can catch the server warming up, and four halvings once all ran to the end (CI, 2026-12-05)
    long_tokens = 4000  # max-model-len 4096 (vllm_server.py)
    long = SamplingParams(max_new_tokens=long_tokens, temperature=T, ignore_eos=True)
    timing = SamplingParams(max_new_tokens=256, temperature=T, ignore_eos=True)

    async def seconds_per_token(engine: VLLMEngine) -> float:
        started = time.monotonic()
        result = await engine.generate(PROMPT, timing)
        return (time.monotonic() - started) / len(result.output_ids)  # an overestimate: prefill, HTTP

    async def run() -> tuple[GenerateResult, GenerateResult]:
        engine = _engine(vllm_server)
        try:
            await engine.probe()
            delay = 0.25 * long_tokens * min([await seconds_per_token(engine) for _ in range(2)])
            for attempt in range(8):
                task = asyncio.create_task(engine.generate(PROMPT, long, request_id=f"cut-me-{attempt}"))
                await asyncio.sleep(delay)
                too_late = task.done()  # the request had finished: cut sooner
                await engine.abort([f"cut-me-{attempt}"])
                cut = await asyncio.wait_for(task, timeout=60)
                if cut.finish_reason != "length":
                    break
                # it still ran to the end: too late, or so early that the server did not know the request yet
                delay = delay / 4 if too_late else delay * 2
            rest = SamplingParams(max_new_tokens=8, temperature=T, ignore_eos=True)
            resumed = await engine.generate(PROMPT + cut.output_ids, rest)  # the server serves again after /resume
            return cut, resumed
        finally:
            await engine.close()

    cut, resumed = asyncio.run(run())
    assert cut.finish_reason == "abort"
    assert 0 < len(cut.output_ids) < long_tokens and len(cut.logprobs) == len(cut.output_ids)
    assert resumed.finish_reason == "length" and len(resumed.output_ids) == 8
    assert resumed.prompt_tokens == len(PROMPT) + len(cut.output_ids)
    recomputed = _recompute(vllm_server.model_dir, PROMPT, cut, T)
    diff = (recomputed - torch.tensor(cut.logprobs)).abs().max().item()
    print(f"vllm tier: the abort kept {len(cut.output_ids)} tokens; max |engine - trainer| {diff:.2e}")
    assert diff < LOGPROB_TOL


def test_a_weight_sync_loads_the_new_policy_and_records_its_version(vllm_server: VLLMServer, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(vllm_server.model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        for param in lm.parameters():
            param.mul_(1.5)  # sharper logits: a policy that differs measurably from version 0
    new_dir = publish_weights(tmp_path / "weights", 1, lambda d: lm.save_pretrained(d, safe_serialization=True))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (new_dir / name).write_bytes((vllm_server.model_dir / name).read_bytes())
    sampling = SamplingParams(max_new_tokens=12, temperature=T, ignore_eos=True)

    async def run() -> GenerateResult:
        engine = _engine(vllm_server)
        try:
            await engine.probe()
            await engine.update_weights(str(new_dir), version=1)
            assert engine.weight_version == 1
            return await engine.generate(PROMPT, sampling)
        finally:
            await engine.close()

    result = asyncio.run(run())
    assert [(s.version, s.start, s.end) for s in result.version_spans] == [(1, 0, 12)]
    with urllib.request.urlopen(vllm_server.url + "/weight_info", timeout=10) as reply:
        assert str(json.loads(reply.read())["weight_version"]) == "1"
    new_logp = _recompute(new_dir, PROMPT, result, T)
    old_logp = _recompute(vllm_server.model_dir, PROMPT, result, T)
    got = torch.tensor(result.logprobs)
    assert (new_logp - got).abs().max().item() < LOGPROB_TOL
    assert (old_logp - got).abs().max().item() > 100 * LOGPROB_TOL


@pytest.fixture(autouse=True)
def _report_start_time(vllm_server: VLLMServer, record_property: pytest.RecordProperty) -> None:
    record_property("vllm_server_start_s", round(vllm_server.start_s, 1))


def test_a_tied_lm_head_is_refused_before_the_server_is_touched(tmp_path: Path) -> None:
    from agentrl.errors import EngineConfigError
    from agentrl.models.tiny import make_tiny_model

    tied = make_tiny_model(tmp_path / "tied", hidden_size=128, head_dim=64)  # tied, as SmolLM2 and Qwen3-0.6B
    engine = VLLMEngineConfig(urls=["http://127.0.0.1:9"]).build(ModelConfig(path=str(tied)))
    with pytest.raises(EngineConfigError, match="tie_word_embeddings=true"):
        asyncio.run(engine.update_weights(str(tied), version=1))


def _running_requests(url: str) -> float:
    """vLLM's own gauge of the requests it is running (``/metrics``)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:num_requests_running"))


def test_aborting_one_request_cuts_it_and_no_other(vllm_server: VLLMServer) -> None:
    """Dropping one group must not cut the other groups' turns: a pause would end every request on the server."""
    kept_tokens, dropped_tokens = 1500, 4000

    async def run() -> tuple[GenerateResult, GenerateResult, float]:
        engine = _engine(vllm_server)
        try:
            await engine.probe()
            keep = SamplingParams(max_new_tokens=kept_tokens, temperature=T, ignore_eos=True)
            drop = SamplingParams(max_new_tokens=dropped_tokens, temperature=T, ignore_eos=True)
            kept_task = asyncio.create_task(engine.generate(PROMPT, keep, request_id="keep-me"))
            dropped_task = asyncio.create_task(engine.generate(PROMPT[::-1], drop, request_id="drop-me"))
            deadline = time.monotonic() + 120  # bounded: a request that never shows up fails, never hangs the suite
            while _running_requests(vllm_server.url) < 2:  # both reached the server
                assert time.monotonic() < deadline, "the two requests were never running on the server together"
                await asyncio.sleep(0.05)
            await engine.abort(["drop-me"])
            dropped = await asyncio.wait_for(dropped_task, timeout=60)
            kept = await asyncio.wait_for(kept_task, timeout=600)
            return kept, dropped, _running_requests(vllm_server.url)
        finally:
            await engine.close()

    kept, dropped, running_after = asyncio.run(run())
    assert kept.finish_reason == "length" and len(kept.output_ids) == kept_tokens  # not cut
    assert dropped.finish_reason == "abort" and len(dropped.output_ids) < dropped_tokens
    assert running_after == 0  # the server dropped the cut request too: it would still run its 4,000 tokens


def test_episodes_starting_together_probe_the_server_once(vllm_server: VLLMServer) -> None:
    """The probe (model name, logprob semantics, dev mode) runs before the first request, once: not once per
    episode of a step that starts them all together."""
    calls: list[int] = []

    async def run() -> list[GenerateResult]:
        engine = _engine(vllm_server)
        real_probe = engine.probe

        async def counted() -> list[str]:  # the real probe, counted
            calls.append(1)
            return await real_probe()

        engine.probe = counted  # type: ignore[method-assign]
        try:
            sampling = SamplingParams(max_new_tokens=4, temperature=T, ignore_eos=True)
            return await asyncio.gather(*(engine.generate(PROMPT, sampling) for _ in range(12)))
        finally:
            await engine.close()

    results = asyncio.run(run())
    assert len(calls) == 1, f"{len(calls)} probes for 12 requests"
    assert all(len(r.output_ids) == 4 for r in results)


def test_a_stop_string_split_by_a_step_boundary_abort_is_cut_where_it_completes(vllm_server: VLLMServer) -> None:
    """vLLM matches stop strings in one request's output only; the rollout's whole-turn check finds one that a
    step-boundary abort cut in two (tests/stop_straddle.py)."""
    import sys

    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from stop_straddle import check_straddled_stop, straddled_stop

    decode = AutoTokenizer.from_pretrained(vllm_server.model_dir).decode
    engine = _engine(vllm_server)

    async def run() -> dict[str, object]:
        try:
            return await straddled_stop(engine, PROMPT, decode)
        finally:
            await engine.close()

    found = asyncio.run(run())
    print(f"vllm tier: stop {found['stop']!r} split after token {found['j']}")
    check_straddled_stop(found, decode)
