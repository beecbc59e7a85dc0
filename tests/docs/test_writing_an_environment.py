"""docs/writing-an-environment.md beyond its first example (tests/test_docs.py runs that): the stateful-tool
pattern runs as written on a real process sandbox, and the contract error it quotes is the one agentrl raises."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrl.env import MultiTurnEnv
from agentrl.env.contract import checked_reset
from agentrl.errors import EnvContractError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "writing-an-environment.md"


def _block(language: str, containing: str) -> str:
    found = re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL | re.M)
    return next(block for block in found if containing in block)


def test_tools_that_use_the_envs_own_sandbox_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "pycalc.py").write_text(_block("python", "class PyCalc"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "pycalc.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["True", "1.0"]


def test_the_quoted_contract_error_is_the_real_one() -> None:
    quoted = _block("text", "broke the env contract").strip()

    class MathQuiz(MultiTurnEnv):
        """Returns its question as a str: the bug the doc quotes."""

    with pytest.raises(EnvContractError) as caught:
        checked_reset(MathQuiz(), ("What is 2 + 2?", {}))
    assert str(caught.value) == quoted


def test_the_info_table_lists_every_key_of_env_info() -> None:
    from agentrl.env import EnvInfo

    text = DOC.read_text(encoding="utf-8")
    start = text.index("## What agentrl reads from `info`")
    table = text[start : text.index("\n## ", start + 1)]
    rows: dict[str, Any] = {m.group(1): m for m in re.finditer(r"^\| `(\w+)` \|", table, flags=re.M)}
    assert set(EnvInfo.__annotations__) <= set(rows), sorted(set(EnvInfo.__annotations__) - set(rows))


def test_the_sandbox_api_is_linked_from_the_tutorial() -> None:
    text = DOC.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]*sandboxes/README\.md)\)", text)
    assert links and all((DOC.parent / link).resolve().is_file() for link in links), links


def test_the_first_run_section_says_what_to_expect_and_its_warmup_command_parses() -> None:
    """A newcomer's first run learned nothing (0 valid tool calls): the doc says so and how to get signal."""
    import shlex

    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Your first run") : text.index("## Rewards: per turn and outcome")]
    flat = " ".join(section.split())
    assert "0 valid tool calls" in flat and "Partial credit for well-formed calls" in flat
    assert "env.step_timeout_s" in flat and "agentrl train --resume RUN_DIR" in flat and "env_errors/" in flat
    command = next(
        line.strip(" `") for line in section.splitlines() if "scripts/warmup_sft.py" in line and "--out" in line
    )
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from warmup_sft import parse_args
    finally:
        sys.path.pop(0)
    args = parse_args(shlex.split(command)[2:])  # every flag the doc shows exists
    assert args.env == "my_envs:Adventure" and args.chats == Path("chats.jsonl")


def test_the_worked_credit_example_is_what_the_schemes_compute() -> None:
    """The table under "A tool env with per-turn rewards": the return (no separate outcome), one group of four."""
    from agentrl.algos import Normalization, RewardBatch
    from agentrl.algos.config import AlgorithmConfig

    text = (ROOT / "docs" / "writing-an-environment.md").read_text(encoding="utf-8")
    turns = [[0.1, 1.0], [0.1, 0.0], [0.0, 0.0, 0.0], [0.1, 0.0, 1.0]]
    batch = RewardBatch([sum(t) for t in turns], turns, 4, separate_outcome=[False] * 4)
    rows = {}
    for scheme in ("outcome", "discounted_return"):
        algo = AlgorithmConfig(turn_advantage=scheme)
        advantages = algo.turn_advantage(batch, Normalization(eps=algo.adv_eps, scale=algo.adv_scale))
        rows[scheme] = [[f"{a:+.2f}" for a in episode] for episode in advantages]
    for name, outcome, per_turn in zip("ABCD", rows["outcome"], rows["discounted_return"]):
        line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        assert cells[3] == outcome[0] and cells[4] == ", ".join(per_turn), line
