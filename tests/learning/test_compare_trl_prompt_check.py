"""compare_trl's prompt-id check, on TRL's own prompt tokenization (``GRPOTrainer._tokenize_prompts`` bound to an
object holding just the tokenizer, which is all its text-prompt path reads): agentrl's rendered prompts pass, and
one token off stops the run naming the prompt."""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path

import pytest
from learning_helpers import ROOT

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

sys.path.insert(0, str(ROOT / "bench" / "studies"))


def _trl_tokenizer_side(tokenizer: object) -> types.SimpleNamespace:
    from trl import GRPOTrainer

    holder = types.SimpleNamespace(processing_class=tokenizer)
    holder._tokenize_prompts = functools.partial(GRPOTrainer._tokenize_prompts, holder)
    return holder


def test_prompt_ids_match_and_a_mismatch_stops_the_run(tiny_job: Path) -> None:
    pytest.importorskip("trl", reason="the comparison needs the optional extra: pip install -e '.[compare]'")
    from compare_trl import check_prompt_ids, trl_dataset

    from agentrl.job.loader import load_config
    from agentrl.job.stack import load_run_tokenizer

    cfg = load_config(str(tiny_job), [])
    tokenizer = load_run_tokenizer(cfg)
    dataset, expected = trl_dataset(cfg, tokenizer)
    prompts = list(dataset["prompt"])
    assert len(prompts) == cfg.trainer.steps * cfg.rollout.prompts_per_step == len(expected)
    assert all(len(ids) > 20 for ids in expected.values())  # chat-templated task statements, not empty strings

    seen: list[int] = []
    trl_side = _trl_tokenizer_side(tokenizer)
    check_prompt_ids(trl_side, expected, seen)
    ids, _, _ = trl_side._tokenize_prompts(prompts)
    assert [list(x) for x in ids] == [expected[p] for p in prompts] and seen == [len(prompts)]

    tampered = dict(expected)
    tampered[prompts[1]] = [*expected[prompts[1]][:-1], expected[prompts[1]][-1] + 1]
    trl_side = _trl_tokenizer_side(tokenizer)
    check_prompt_ids(trl_side, tampered, seen)
    with pytest.raises(RuntimeError, match="TRL tokenized a prompt differently from agentrl"):
        trl_side._tokenize_prompts(prompts)
    assert seen == [len(prompts)]  # the failed batch is not counted as checked


def test_a_trl_without_the_hook_is_refused() -> None:
    from compare_trl import check_prompt_ids

    with pytest.raises(RuntimeError, match="trl==1.16.0"):
        check_prompt_ids(types.SimpleNamespace(), {}, [])
