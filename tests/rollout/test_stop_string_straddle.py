"""A stop string cut in two at a step-boundary abort is matched over the whole turn (the embedded engine here;
tests/sglang_real and tests/vllm_real run the same check on the live servers)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from transformers import AutoTokenizer

from agentrl.engines.base import GenerateResult, VersionSpan
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.rollout.stop_strings import cut_at_straddling_stop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stop_straddle import check_straddled_stop, straddled_stop

PROMPT = [5, 17, 300, 42, 9, 77, 1024, 3]


def test_the_embedded_engine_misses_a_straddling_stop_and_the_turn_check_cuts_there(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    decode = tokenizer.decode
    engine = EmbeddedEngine.from_pretrained(
        tiny_model_dir, config=EmbeddedEngineConfig(max_batch_size=2, max_seq_len=512, seed=0)
    )

    async def run() -> dict[str, object]:
        try:
            return await straddled_stop(engine, PROMPT, decode)
        finally:
            await engine.close()

    check_straddled_stop(asyncio.run(run()), decode)


def test_a_stop_string_inside_the_earlier_part_or_absent_leaves_the_result_alone() -> None:
    def decode(ids: list[int]) -> str:
        return "".join(chr(ord("a") + i) for i in ids)

    result = GenerateResult("r", [2, 3, 4], [-0.1, -0.2, -0.3], "length", [VersionSpan(2, 0, 3)], 4)  # "cde"
    assert cut_at_straddling_stop([0, 1], result, ("zz",), decode) is result  # absent
    assert cut_at_straddling_stop([0, 1], result, ("ab",), decode) is result  # wholly before the cut
    cut = cut_at_straddling_stop([0, 1], result, ("bcd",), decode)  # "b" before the cut, "cd" after it
    assert (cut.output_ids, cut.logprobs, cut.finish_reason, cut.matched_stop) == ([2, 3], [-0.1, -0.2], "stop", "bcd")
    assert [(s.version, s.start, s.end) for s in cut.version_spans] == [(2, 0, 2)]
