"""docs/partial-rollouts.md stays true to the code: its config keys, defaults and buffer file name."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import RolloutConfig, TrainerConfig
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.rollout.buffer import BUFFER_FILE, RolloutBuffer
from agentrl.rollout.fingerprint import rollout_fingerprints

DOC = Path(__file__).resolve().parents[2] / "docs" / "partial-rollouts.md"
SECTIONS = {"rollout": RolloutConfig, "algorithm": AlgorithmConfig, "trainer": TrainerConfig}


def test_config_table_names_real_keys_with_their_defaults() -> None:
    rows = re.findall(r"^\| `(\w+)\.(\w+)` \| `([^`]*)` \|", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(rows) >= 7
    for section, key, default in rows:
        field = SECTIONS[section].model_fields[key]
        assert str(field.default).lower() == default.lower(), (
            f"{section}.{key}: doc says {default}, code {field.default}"
        )


def test_buffer_tables_and_fingerprint_keys_match_the_doc(tmp_path: Path, tiny_tokenizer: object) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"RUN_DIR/{BUFFER_FILE}" in text
    RolloutBuffer(tmp_path / BUFFER_FILE).close()
    with closing(sqlite3.connect(tmp_path / BUFFER_FILE)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert all(f"| `{table}` |" in text for table in tables)
    client = SGLangEngine(SGLangEngineConfig(urls=["http://127.0.0.1:1"]))  # no request is sent
    assert all(f"| `{key}` |" in text for key in rollout_fingerprints(tiny_tokenizer, client))
