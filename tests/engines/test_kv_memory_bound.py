"""The embedded engine's key/value buffers stay within the bound its preflight states: at most
``max_batch_size`` rows (the scheduler never runs more) by ``max_cols_bound(max_seq_len)`` columns, however
requests join and leave."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine_harness import build_embedded

from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import kv_bytes_per_token
from agentrl.engines.embedded.kv_cache import max_cols_bound


def test_buffers_never_exceed_the_batch_size_and_the_column_bound(tiny_model_dir: Path) -> None:
    max_batch, max_seq_len = 3, 64
    engine = build_embedded(tiny_model_dir, max_batch_size=max_batch, max_seq_len=max_seq_len, prefix_cache_tokens=0)
    cache = engine.runner.cache
    seen: list[tuple[int, int, int]] = []
    relayout = cache._relayout

    def watched(rows_cap: int, cols_cap: int, live_lo: int, new_end: int) -> None:
        relayout(rows_cap, cols_cap, live_lo, new_end)
        held = sum(t.nbytes for t in cache.keys + cache.values if t is not None)
        seen.append((cache.rows_cap, cache.cols_cap, held))

    cache._relayout = watched  # type: ignore[method-assign]

    async def traffic() -> None:
        # 8 requests over 3 slots, of different lengths: rows join and leave while the write column advances
        jobs = [
            engine.generate(
                list(range(5, 5 + 3 + i)),
                SamplingParams(max_new_tokens=20 + 4 * i, temperature=1.0, ignore_eos=True, seed=i),
            )
            for i in range(8)
        ]
        results = await asyncio.gather(*jobs)
        assert [len(r.output_ids) for r in results] == [20 + 4 * i for i in range(8)]

    try:
        asyncio.run(traffic())
    finally:
        asyncio.run(engine.close())
    assert len(seen) >= 2, "the traffic should have made the buffers grow more than once"
    per_token = kv_bytes_per_token(json.loads((tiny_model_dir / "config.json").read_text()), 4)
    assert max(cols for _, cols, _ in seen) > max_seq_len, "the write column should have needed headroom"
    for rows_cap, cols_cap, held in seen:
        assert rows_cap <= max_batch, f"{rows_cap} rows allocated for a batch of {max_batch}"
        assert cols_cap <= max_cols_bound(max_seq_len)
        assert held <= per_token * max_batch * max_cols_bound(max_seq_len)
