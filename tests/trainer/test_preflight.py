"""``agentrl train --dry-run``: checks model dir, engine servers and env resources without training."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agentrl.errors import EngineError, ModelLoadError, PreflightError
from agentrl.job.loader import load_config
from agentrl.trainer.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]


def _cfg(model_dir: Path | str, *overrides: str):
    base = [
        f"model.path={model_dir}",
        "env.id=agentrl/MagicWord-v0",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "trainer.mini_batches=1",
        "rollout.max_new_tokens=8",
        "rollout.max_episode_tokens=128",
    ]
    return load_config(ROOT / "configs" / "tiny_debug.yaml", [*base, *overrides])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dry_run_prints_what_it_checked_and_trains_nothing(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli.main",
            "train",
            str(ROOT / "configs" / "tiny_debug.yaml"),
            "--dry-run",
            f"model.path={tiny_model_dir}",
            f"logging.run_root={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ok: model" in result.stdout and "qwen3" in result.stdout
    assert "ok: env agentrl/MagicWord-v0" in result.stdout
    assert "dry run passed" in result.stdout
    assert not any(tmp_path.iterdir()), "a dry run must not create a run directory"


def test_missing_model_dir_is_named_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="make-model"):
        preflight(_cfg(tmp_path / "nope"))


def test_sglang_server_down_is_an_error_naming_the_url(tiny_model_dir: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    cfg = _cfg(
        tiny_model_dir,
        "engine.kind=sglang",
        f"engine.urls=[{url}]",
        "engine.max_retries=0",
        "engine.max_batch_size=null",
    )
    with pytest.raises(EngineError, match=url.replace(".", r"\.")):
        preflight(cfg)


@pytest.mark.slow
def test_live_server_passes_health_and_logprob_checks(tiny_model_dir: Path) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agentrl.cli.main", "serve", "--model", str(tiny_model_dir), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        lines = preflight(
            _cfg(tiny_model_dir, "engine.kind=sglang", f"engine.urls=[{url}]", "engine.max_batch_size=null")
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert any(url in line and "log_softmax(logits / T)" in line and "weight_version 0" in line for line in lines)
    assert any("SGLANG_RETURN_ORIGINAL_LOGPROB" in line and "not checked" in line for line in lines), lines


def test_env_preflight_failure_stops_the_dry_run(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fault we cannot cause for real without breaking the machine's Docker engine: the env's
    # resource check fails (a fake, named as such); the dry run must surface the env's own error.
    from agentrl.env import MultiTurnEnv

    def broken(self: MultiTurnEnv) -> list[str]:
        raise PreflightError("sandbox image missing; run bash scripts/docker_setup.sh")

    monkeypatch.setattr(MultiTurnEnv, "preflight", broken)
    with pytest.raises(PreflightError, match="docker_setup"):
        preflight(_cfg(tiny_model_dir))


def test_dry_run_builds_the_env_tool_schemas(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool typed with the env's own class failed only after the model loaded, as a long pydantic traceback."""
    from agentrl.errors import ConfigError

    (tmp_path / "room_tools_env.py").write_text(
        "from agentrl.env import MultiTurnEnv, user\n"
        "class Room:\n    pass\n"
        "def go(where: str) -> str:\n    '''Go.\n\n    Args:\n        were: Where to (a stale name).\n    '''\n"
        "    return where\n"
        "def enter(room: Room) -> str:\n    '''Enter a room.'''\n    return 'in'\n"
        "class Good(MultiTurnEnv):\n    tools = (go,)\n"
        "    def reset(self, *, seed=None, options=None):\n        super().reset(seed=seed)\n"
        "        return [user('Where?')], {}\n"
        "    def step(self, action):\n        return [], 0.0, True, False, {}\n"
        "class Bad(Good):\n    tools = (go, enter)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = preflight(_cfg(tiny_model_dir, "env.id=room_tools_env:Good", "env.kwargs={}"))
    assert "env room_tools_env:Good: tool schemas built (go)" in lines
    assert any(line.startswith("warning: tool 'go': its docstring's Args: documents 'were'") for line in lines)
    with pytest.raises(ConfigError, match="^tool 'enter' parameter 'room' is typed Room, which has no JSON schema"):
        preflight(_cfg(tiny_model_dir, "env.id=room_tools_env:Bad", "env.kwargs={}"))


def test_dry_run_bounds_its_probe_turn_of_an_env_whose_step_blocks(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "blocking_env.py").write_text(
        "import threading\n"
        "from agentrl.env import MultiTurnEnv, user\n"
        "class Blocks(MultiTurnEnv):\n"
        "    def reset(self, *, seed=None, options=None):\n        super().reset(seed=seed)\n"
        "        return [user('Go.')], {}\n"
        "    def step(self, action):\n        threading.Event().wait()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PreflightError, match=r"one turn \(reset, then one step\) did not return within 1 s"):
        preflight(_cfg(tiny_model_dir, "env.id=blocking_env:Blocks", "env.kwargs={}", "env.step_timeout_s=1"))


@pytest.mark.parametrize(
    ("overrides", "engine", "update", "recomputes_all"),
    [
        ((), "float32", "float32", False),
        (("model.dtype=bfloat16",), "bfloat16", "float32", True),
        (("trainer.precision=bfloat16_autocast",), "float32", "bf16 autocast", True),
    ],
)
def test_the_dry_run_says_what_precision_resolves_to_and_what_it_costs(
    tiny_model_dir: Path, overrides: tuple[str, ...], engine: str, update: str, recomputes_all: bool
) -> None:
    from agentrl.trainer.preflight import check_precision

    [line] = check_precision(_cfg(tiny_model_dir, "algorithm.proximal=recompute_stale", *overrides))
    assert f"engine {engine}, update {update}, master weights float32" in line
    assert ("recomputes every trained row" in line) == recomputes_all


@pytest.mark.parametrize(
    ("overrides", "evaluator"),
    [
        (("model.dtype=bfloat16", "eval.precision=float32"), "a float32 twin of the engine"),
        (("eval.precision=float32",), "the engine (already float32)"),
        (("model.dtype=bfloat16",), None),  # eval.precision rollout: nothing to say
    ],
)
def test_the_dry_run_says_where_the_held_out_evaluation_decodes(
    tiny_model_dir: Path, overrides: tuple[str, ...], evaluator: str | None
) -> None:
    from agentrl.trainer.preflight import check_precision

    [line] = check_precision(_cfg(tiny_model_dir, "eval.splits=[train]", *overrides))
    expected = f"held-out evaluation in {evaluator} (eval.precision float32)" if evaluator else None
    assert (expected in line) if expected else "held-out" not in line
