"""The contract every sandbox backend passes: state, files, exit codes, streams, reset, timeouts, caps, close."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import Sandbox, SandboxClosedError, SandboxFileError, SandboxInputError, make_sandbox

ConfigFactory = Callable[..., Any]  # the `config_for` fixture


def test_cells_share_state_until_reset(sandbox: Sandbox) -> None:
    assert sandbox.run_python("import math\nx = 40", 5).exit_code == 0
    result = sandbox.run_python("x + 2", 5)
    assert (result.stdout, result.exit_code, result.restarted) == ("42\n", 0, False)
    sandbox.reset()
    after = sandbox.run_python("x", 5)
    assert after.exit_code == 1 and "NameError" in after.stderr


def test_files_round_trip_and_reset_clears_them(sandbox: Sandbox) -> None:
    big = bytes(range(256)) * 16384  # 4 MiB: a multi-chunk frame each way
    sandbox.write_files({"data/in.txt": "héllo\n", "blob.bin": big})
    assert sandbox.read_file("blob.bin") == big
    cell = sandbox.run_python(
        "print(open('data/in.txt').read().upper(), end='')\n_ = open('out.txt','w').write('ok')", 5
    )
    assert cell.stdout == "HÉLLO\n"
    assert sandbox.read_file("out.txt") == b"ok"
    sandbox.reset()
    with pytest.raises(SandboxFileError, match="out.txt"):
        sandbox.read_file("out.txt")


def test_exit_codes_and_stderr(sandbox: Sandbox) -> None:
    failing = sandbox.run_python("print('before')\nraise ValueError('boom')", 5)
    assert failing.exit_code == 1 and failing.stdout == "before\n"
    assert "ValueError: boom" in failing.stderr and 'File "<cell>", line 2' in failing.stderr
    assert sandbox.run_python("import sys; sys.exit(3)", 5).exit_code == 3
    program = sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 7"], 5)
    assert (program.stdout, program.stderr, program.exit_code) == ("out\n", "err\n", 7)
    missing = sandbox.exec(["no-such-program"], 5)
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr


def test_exec_feeds_stdin_and_runs_written_scripts(sandbox: Sandbox) -> None:
    sandbox.write_files({"upper.py": "import sys\nprint(sys.stdin.read().upper())"})
    result = sandbox.exec(["python3", "upper.py"], 10, stdin="ünïcode ✓")
    assert result.stdout == "ÜNÏCODE ✓\n" and result.ok


def test_unicode_round_trips(sandbox: Sandbox) -> None:
    text = "é ✓ 日本 🙂"
    result = sandbox.run_python(f"s = {text!r}\nprint(s)\nimport sys; print(s, file=sys.stderr)", 5)
    assert (result.stdout, result.stderr) == (text + "\n", text + "\n")


def test_timeout_kills_and_session_recovers(sandbox: Sandbox) -> None:
    sandbox.write_files({"kept.txt": "still here"})
    sandbox.run_python("y = 1", 5)
    start = time.monotonic()
    result = sandbox.run_python("print('partial', flush=True)\nwhile True: pass", 0.5)
    assert time.monotonic() - start < 2.0
    assert result.timed_out and result.exit_code is None and result.restarted
    assert "partial" in result.stdout and "restarted" in result.note
    assert sandbox.run_python("print(open('kept.txt').read())", 5).stdout == "still here\n"
    assert "NameError" in sandbox.run_python("y", 5).stderr  # the session's state is gone, as announced
    slow = sandbox.exec(["sleep", "30"], 0.5)
    assert slow.timed_out and slow.exit_code is None


def test_output_is_capped_with_a_flag(sandbox: Sandbox) -> None:
    result = sandbox.run_python("print('x' * 100_000)", 5)
    assert result.truncated and result.exit_code == 0
    assert result.stdout.startswith("x" * 4096) and len(result.stdout) < 4096 + 100
    assert "truncated" in result.stdout
    assert not sandbox.run_python("print('short')", 5).truncated


def test_bad_input_names_the_fix(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxInputError, match="code must be a str"):
        sandbox.run_python(b"print(1)", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sandbox.run_python(123, 5)  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan"), "5"):
        with pytest.raises(SandboxInputError, match="timeout_s must be a number > 0"):
            sandbox.run_python("print(1)", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="argv must be a non-empty list"):
        sandbox.exec([], 5)
    assert sandbox.run_python("print(1)", 5).ok


def test_close_is_idempotent_and_cleans_up(backend: str, config_for: ConfigFactory) -> None:
    sandbox = make_sandbox(config_for(backend))
    with sandbox:
        assert sandbox.run_python("1 + 1", 5).stdout == "2\n"
    sandbox.close()
    with pytest.raises(SandboxClosedError, match="closed"):
        sandbox.run_python("1", 5)
    if backend == "docker":
        assert sandbox.container_id is None  # type: ignore[attr-defined]


def test_process_backend_warns_once_that_isolation_is_weaker(
    monkeypatch: pytest.MonkeyPatch, config_for: ConfigFactory
) -> None:
    from sandboxes import process_backend

    monkeypatch.setattr(process_backend, "_warned", False)
    with pytest.warns(RuntimeWarning, match="isolation is weaker"):
        first = make_sandbox(config_for("process"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = make_sandbox(config_for("process"))
    first.close()
    second.close()


def test_exec_streams_large_stdin_and_refuses_oversized_reads(sandbox: Sandbox) -> None:
    big = "a" * 1_000_000  # larger than a pipe buffer: the server must feed it while draining output
    assert sandbox.exec(["wc", "-c"], 10, stdin=big).stdout.strip() == "1000000"
    sandbox.run_python(f"_ = open('big.bin', 'wb').write(bytes({sandbox.config.max_read_bytes + 1}))", 5)
    with pytest.raises(SandboxFileError, match="max_read_bytes"):
        sandbox.read_file("big.bin")


def test_timeout_kills_the_cells_children_too(sandbox: Sandbox) -> None:
    code = "import subprocess\nsubprocess.Popen(['sleep', '4321.5'])\nwhile True: pass"
    assert sandbox.run_python(code, 0.5).timed_out
    probe = (
        "import glob\nn = 0\nfor p in glob.glob('/proc/[0-9]*/cmdline'):\n"
        "    try:\n        n += b'4321.5' in open(p, 'rb').read()\n    except OSError:\n        pass\nprint(n)"
    )
    assert sandbox.run_python(probe, 5).stdout == "0\n"
