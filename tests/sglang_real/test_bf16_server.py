"""Against SGLang's real server in bf16 (what this AMX CPU can run, see SERVER):

- a fresh run samples from its own start weights, not from what an earlier run left on the server: a first run
  moves the weights far (a large learning rate), then a second, fresh run on the same server audits its first
  step (without the start-of-run weight push, it samples from the first run's last policy while the trainer
  computes against the base model);
- ``--dry-run`` reads the server's dtype and warns that bf16 engine logprobs are not the update's;
- a stop string cut in two by a step-boundary abort is found over the whole turn.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import LiveServer, get_json, live_servers, make_llama_model, require_live_sglang

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# A bfloat16 server with torch's attention: on a CPU with AMX, SGLang 0.5.23 routes RMSNorm and attention to
# sgl_kernel 0.4.6.post1's AMX kernels, which have no float32 RMSNorm and another extend_attention_cpu signature (the
# server dies at its first forward). So the audit compares bf16 logprobs with the float32 trainer's, same weights.
SERVER = {"dtype": "bfloat16", "attention_backend": "torch_native"}
AUDIT_TOL = 0.1  # measured 0.003-0.017 with matching weights; 4.65 when the server kept the first run's


@pytest.fixture(scope="module", autouse=True)
def _live_sglang() -> None:
    require_live_sglang()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_llama_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def server(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_servers(llama_dir, tmp_path_factory.mktemp("sglang-logs"), **SERVER) as servers:
        yield servers[0]


def test_a_fresh_run_after_another_samples_its_own_start_weights(
    server: LiveServer, llama_dir: Path, tmp_path: Path
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from live_train import magic_word_run, step_metrics

    engine = {"kind": "sglang", "urls": [server.url]}
    first = step_metrics(magic_word_run(tmp_path, llama_dir, engine, "first", steps=2, lr=0.05))
    assert all(r["train/optimizer_steps"] >= 1 for r in first)  # the first run moved the server's weights
    assert get_json(server.url + "/model_info")[1]["weight_version"] == "2"

    second = step_metrics(magic_word_run(tmp_path, llama_dir, engine, "second", steps=1, lr=1e-3))
    assert [r["step"] for r in second] == [1]
    audits = [r["audit/abs_max"] for r in first], second[0]["audit/abs_max"]
    print(f"sglang tier: audit/abs_max of the first run's steps {audits[0]}, of the second run's step 1 {audits[1]}")
    assert second[0]["audit/abs_max"] < AUDIT_TOL, second[0]  # sampled from the base model, as the trainer's
    assert get_json(server.url + "/model_info")[1]["weight_version"] == "1"


def test_the_dry_run_reads_the_servers_dtype_and_warns_that_bf16_logprobs_are_not_the_updates(
    server: LiveServer, llama_dir: Path, tmp_path: Path
) -> None:
    from agentrl.engines.sglang.config import SGLangEngineConfig
    from agentrl.job.loader import load_config
    from agentrl.trainer.preflight import check_engine

    overrides = [
        f"model.path={llama_dir}",
        "algorithm.old_logprobs=engine",
        "algorithm.proximal=behaviour",  # the engine's logprobs as the ratio's old policy: what the warning is about
        "model.device=cpu",
        "trainer.precision=float32",
    ]
    cfg = load_config(ROOT / "configs" / "tiny_debug.yaml", overrides)
    cfg = cfg.model_copy(update={"engine": SGLangEngineConfig(urls=[server.url])})
    lines = asyncio.run(check_engine(cfg))
    assert any("dtype bfloat16" in line for line in lines), lines  # /server_info's dtype
    assert any(line.startswith("warning:") and "engine bfloat16" in line for line in lines), lines
    recompute = cfg.model_copy(update={"algorithm": cfg.algorithm.model_copy(update={"proximal": "recompute"})})
    assert not any(line.startswith("warning:") for line in asyncio.run(check_engine(recompute)))


def test_a_stop_string_split_by_a_step_boundary_abort_is_cut_where_it_completes(
    server: LiveServer, llama_dir: Path
) -> None:
    """SGLang matches stop strings in one request's output only; the rollout's whole-turn check finds one that a
    step-boundary abort cut in two (tests/stop_straddle.py)."""
    from transformers import AutoTokenizer

    from agentrl.config.sections import ModelConfig
    from agentrl.engines.sglang.config import SGLangEngineConfig

    sys.path.insert(0, str(ROOT / "tests"))
    from stop_straddle import check_straddled_stop, straddled_stop

    decode = AutoTokenizer.from_pretrained(llama_dir).decode
    engine = SGLangEngineConfig(urls=[server.url]).build(ModelConfig(path=str(llama_dir)))

    async def run() -> dict[str, object]:
        try:
            return await straddled_stop(engine, [5, 17, 300, 42, 9, 77, 1024, 3], decode)
        finally:
            await engine.close()  # type: ignore[attr-defined]

    found = asyncio.run(run())
    print(
        f"sglang tier: stop {found['stop']!r} split after token {found['j']}; the server's own finish: "
        f"{found['resumed'].finish_reason}"
    )  # type: ignore[attr-defined]
    check_straddled_stop(found, decode)


def test_recompute_stale_recomputes_every_row_of_a_bf16_server(
    server: LiveServer, llama_dir: Path, tmp_path: Path
) -> None:
    """The trainer reads the server's dtype: bf16 logprobs are not an fp32 trainer's, so under proximal
    recompute_stale even the rows sampled by the current weights are recomputed (a float32 server's would not)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from live_train import magic_word_run, step_metrics

    engine = {"kind": "sglang", "urls": [server.url]}
    # no audit: it reads the engine's logprobs, and recompute_stale clips against a recompute (the config refuses both)
    run = magic_word_run(
        tmp_path, llama_dir, engine, "stale", steps=1, lr=1e-3, proximal="recompute_stale", audit_every=0
    )
    (step,) = step_metrics(run)
    assert step["rollout/staleness_max"] == 0  # every row fresh: only the dtype makes them need a recompute
    trainable = 8 - step["train/skipped_zero_adv_rows"]  # group_size 4 x prompts_per_step 2 rows
    assert trainable >= 1 and step["train/recomputed_rows"] == trainable, step
