"""Helpers of the BFCL tests: BFCL's venv (skip or fail without it), the reference script, driving an episode."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envs.interop.bfcl.bridge import bfcl_python

HERE = Path(__file__).resolve().parent


def require_bfcl() -> Path:
    """BFCL's venv python; skips without it (fails under CI=true: scripts/setup_bfcl.sh makes it)."""
    python = bfcl_python()
    if not python.exists():
        message = f"{python} is missing: run `bash scripts/setup_bfcl.sh`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python


def reference(mode: str, rows: Any, tmp_path: Path) -> Any:
    """Run tests/interop/bfcl_reference.py in BFCL's venv (``scripts``, ``grade`` or ``execute``)."""
    source, target = tmp_path / f"{mode}-in.json", tmp_path / f"{mode}-out.json"
    source.write_text(json.dumps(rows))
    subprocess.run(
        [str(require_bfcl()), str(HERE / "bfcl_reference.py"), mode, str(source), str(target)],
        check=True,
        cwd=tmp_path,
        timeout=600,
    )
    return json.loads(target.read_text())


def play(env: Any, entry_id: str, turns: list[list[str]]) -> dict[str, Any]:
    """Play scripted replies turn by turn; the episode's outcome, per-turn components, rewards and tool texts."""
    env.reset(options={"task_id": entry_id})
    rewards, tool_texts, info, done = [], [], {}, False
    for turn, texts in enumerate(turns):
        assert env.turn == turn, (entry_id, turn, env.turn)
        for text in texts:
            assert not done, f"{entry_id}: the episode ended before turn {turn} was played"
            messages, reward, done, truncated, info = env.step(text)
            assert not truncated
            rewards.append(reward)
            tool_texts += [m["content"] for m in messages if m["role"] == "tool"]
    assert done, f"{entry_id}: the episode did not end after its {len(turns)} turns"
    components = info["reward_components"]
    return {
        "outcome": info["outcome"],
        "turns": [components[f"turn_{i}"] for i in range(len(turns))],
        "rewards": rewards,
        "tool_texts": tool_texts,
        "decoded": info["decoded"],
    }
