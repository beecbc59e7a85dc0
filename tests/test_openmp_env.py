"""The agentrl command's OpenMP wait policy: a short spin unless the user chose one, set before torch loads
libgomp (checked by libgomp's own report of what it read), the same choice for the shell scripts, and recorded in
the run's metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.util.openmp_env import SHORT_SPIN, WAIT_VARIABLES, shell_exports, short_spin_unless_chosen, wait_policy

ROOT = Path(__file__).resolve().parents[1]
# loads the command's module (which chooses the policy), then torch, then runs one parallel region
LOAD_THEN_RUN = "import agentrl.cli.main, torch; torch.ones(1 << 18).add_(1)"


def _bare_env(**chosen: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in WAIT_VARIABLES}
    return {**env, **chosen, "OMP_DISPLAY_ENV": "VERBOSE"}


def _libgomp_read(env: dict[str, str]) -> dict[str, str]:
    """What libgomp itself reports having read at load (OMP_DISPLAY_ENV), by variable."""
    out = subprocess.run([sys.executable, "-c", LOAD_THEN_RUN], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    read = {}
    for line in out.stderr.splitlines():
        name, _, value = line.strip().partition(" = ")
        if name in WAIT_VARIABLES:
            read[name] = value.strip("'")
    if not read:
        pytest.skip("torch's OpenMP runtime is not libgomp here (no OMP_DISPLAY_ENV report)")
    return read


def test_a_short_spin_unless_the_user_chose() -> None:
    assert short_spin_unless_chosen({"PATH": "/bin"}) == SHORT_SPIN
    assert short_spin_unless_chosen({"OMP_WAIT_POLICY": "PASSIVE"}) == {}
    assert short_spin_unless_chosen({"GOMP_SPINCOUNT": "5000"}) == {}
    assert wait_policy({"GOMP_SPINCOUNT": "5000"}) == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "5000"}


def test_libgomp_reads_the_command_s_choice_and_the_user_s() -> None:
    assert _libgomp_read(_bare_env()) == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": SHORT_SPIN["GOMP_SPINCOUNT"]}
    # a user's PASSIVE stands, and with it libgomp's spin count of 0
    assert _libgomp_read(_bare_env(OMP_WAIT_POLICY="PASSIVE")) == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}


def test_the_shell_scripts_export_the_same_choice() -> None:
    shown = "; ".join(f"echo {name}=${name}" for name in WAIT_VARIABLES)
    script = f'eval "$({sys.executable} -m agentrl.util.openmp_env)"; {shown}'
    out = subprocess.run(["bash", "-c", script], env=_bare_env(), capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"{k}={v}" for k, v in SHORT_SPIN.items()]
    assert shell_exports({"OMP_WAIT_POLICY": "PASSIVE"}) == ""  # the user's own export stands
    assert "agentrl.util.openmp_env" in (ROOT / "scripts" / "test.sh").read_text()


def test_the_run_records_its_wait_policy(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.job.loader import load_config
    from agentrl.trainer.validate import RUN_META, write_run_meta

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    cfg = load_config(ROOT / "configs" / "tiny_debug.yaml", [f"model.path={tiny_model_dir}"])
    write_run_meta(tmp_path, cfg)
    meta = json.loads((tmp_path / RUN_META).read_text())
    assert meta["openmp"] == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}
