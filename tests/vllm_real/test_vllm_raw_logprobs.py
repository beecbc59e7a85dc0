"""A vLLM server launched with vLLM's default ``--logprobs-mode raw_logprobs`` returns raw logprobs: the preflight
measures it and says so, and the engine then refuses temperatures whose logprobs it would misreport."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_server import VLLMServer, running_server

from agentrl.config.sections import ModelConfig
from agentrl.engines.base import LogprobSemantics, SamplingParams
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.errors import EngineConfigError


@pytest.fixture(scope="module")
def raw_server(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    log = tmp_path_factory.mktemp("vllm-raw") / "server.log"
    with running_server(vllm_model_dir, log, "--logprobs-mode", "raw_logprobs") as server:
        yield server


def test_a_raw_logprob_server_is_detected_and_refuses_other_temperatures(raw_server: VLLMServer) -> None:
    cfg = VLLMEngineConfig(urls=[raw_server.url])
    model = ModelConfig(path=str(raw_server.model_dir))

    async def run() -> tuple[list[str], LogprobSemantics, int]:
        lines = await cfg.preflight(model)
        engine = cfg.build(model)
        try:
            with pytest.raises(EngineConfigError, match="processed_logprobs"):
                await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, temperature=0.7))
            at_one = await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=4, temperature=1.0))
            return lines, engine.semantics, len(at_one.logprobs)
        finally:
            await engine.close()

    lines, semantics, n = asyncio.run(run())
    assert any("RAW logprobs" in line for line in lines), lines
    assert semantics == LogprobSemantics.RAW and n == 4
