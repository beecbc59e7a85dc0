"""scripts/launch_sglang.sh: the documented form, its argument checks, and a command line that SGLang
0.5.23's own ``ServerArgs`` parser accepts with the values training needs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from sglang_install import ROOT, run_sglang_python

SCRIPT = ROOT / "scripts" / "launch_sglang.sh"
PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
print(json.dumps(vars(parser.parse_args(sys.argv[1:])), default=str))
"""


def _launch(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "AGENTRL_PRINT_ONLY": "1", "PYTHON": "python", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=30)


def test_documented_form_parses_with_sglangs_own_server_args(tiny_model_dir: Path) -> None:
    done = _launch(str(tiny_model_dir), "30001", "2,3", "--context-length", "4096", HOST="0.0.0.0")
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout)
    assert words[0] == "CUDA_VISIBLE_DEVICES=2,3"  # the GPU is pinned, not passed to SGLang
    assert words[1:4] == ["python", "-m", "sglang.launch_server"]
    parsed = json.loads(run_sglang_python(PARSE, *words[4:]).stdout)
    assert parsed["model_path"] == str(tiny_model_dir) and parsed["port"] == 30001 and parsed["host"] == "0.0.0.0"
    assert parsed["tp_size"] == 2 and parsed["weight_version"] == "0" and parsed["mem_fraction_static"] == 0.8
    assert parsed["context_length"] == 4096 and parsed["skip_tokenizer_init"] is False


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "usage:"),
        (("{model}", "30000"), {}, "usage:"),
        (("{model}", "http", "0"), {}, "PORT must be a number"),
        (("{model}", "30000", "cuda:0"), {}, "GPUS must be GPU indices"),
        (("{model}", "30000", "0", "--tp-size", "2"), {}, "--tp-size is set by this script"),
        (("{model}", "30000", "0", "--skip-tokenizer-init"), {}, "--skip-tokenizer-init is set by this script"),
        (("/no/such/model", "30000", "0"), {}, "has no config.json"),
        (("{model}", "30000", "0"), {"SGLANG_RETURN_ORIGINAL_LOGPROB": "1"}, "SGLANG_RETURN_ORIGINAL_LOGPROB is set"),
    ],
)
def test_bad_invocations_are_refused_with_the_fix(
    tiny_model_dir: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    done = _launch(*(a.format(model=tiny_model_dir) for a in args), **env)
    assert done.returncode == 2 and message in done.stderr and done.stdout == ""
