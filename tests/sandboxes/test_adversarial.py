"""Hostile cells: each is contained within its timeout plus a small margin, gives a structured result,
and leaves the sandbox usable. The process backend runs the same cases wherever its isolation allows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import ExecResult, Sandbox, make_sandbox

ConfigFactory = Callable[..., Any]  # the `config_for` fixture


MARGIN_S = 3.0


def run_contained(sandbox: Sandbox, code: str, timeout_s: float) -> ExecResult:
    start = time.monotonic()
    result = sandbox.run_python(code, timeout_s)
    assert time.monotonic() - start < timeout_s + MARGIN_S, f"not contained: {result}"
    assert sandbox.run_python("print(2 + 2)", 5).stdout == "4\n", "sandbox unusable afterwards"
    return result


def test_infinite_loop_and_sleep_are_killed(sandbox: Sandbox) -> None:
    assert run_contained(sandbox, "while True: pass", 1.0).timed_out
    assert run_contained(sandbox, "import time; time.sleep(60)", 1.0).timed_out


def test_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = run_contained(sandbox, code, 1.5)
    assert result.timed_out and result.restarted


def test_huge_allocation_hits_the_memory_limit(sandbox: Sandbox) -> None:
    result = run_contained(sandbox, "b = bytearray(8 * 1024**3)\nprint('allocated')", 10.0)
    assert result.oom_killed and "allocated" not in result.stdout and not result.timed_out


def test_200_mb_of_stdout_is_capped_inside(sandbox: Sandbox) -> None:
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(200): sys.stdout.write(chunk)"
    result = run_contained(sandbox, code, 20.0)
    assert result.exit_code == 0 and result.truncated and len(result.stdout) < 10_000
    program = sandbox.exec(["sh", "-c", "head -c 200000000 /dev/zero | tr '\\0' y"], 20.0)
    assert program.exit_code == 0 and program.truncated and len(program.stdout) < 10_000


def test_no_outbound_network(sandbox: Sandbox) -> None:
    if not getattr(sandbox, "network_isolated", True):
        pytest.skip("this kernel allows no network namespace for the process backend")
    code = (
        "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', e)"
    )
    result = run_contained(sandbox, code, 5.0)
    assert result.stdout.startswith("blocked")


def test_cannot_write_system_dirs_or_be_root(sandbox: Sandbox) -> None:
    result = run_contained(sandbox, "import os\nprint(os.getuid(), os.geteuid())\nopen('/usr/evil', 'w')", 5.0)
    assert result.exit_code == 1 and ("Read-only" in result.stderr or "Permission denied" in result.stderr)
    assert "0" not in result.stdout.split()
    assert not os.path.exists("/usr/evil")


def test_no_docker_socket_or_host_secrets(
    backend: str, monkeypatch: pytest.MonkeyPatch, config_for: ConfigFactory
) -> None:
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "hunter2-secret")
    with make_sandbox(config_for(backend)) as sandbox:
        code = (
            "import os, glob\n"
            "print('sock', any(os.path.exists(p) for p in ('/var/run/docker.sock', '/run/docker.sock')))\n"
            "blob = repr(dict(os.environ))\n"
            "for path in glob.glob('/proc/[0-9]*/environ'):\n"
            "    try:\n        blob += open(path, 'rb').read().decode('latin-1')\n"
            "    except OSError:\n        pass\n"
            "print('secret', 'hunter2' in blob)"
        )
        result = run_contained(sandbox, code, 5.0)
        if backend == "docker":
            assert "sock False" in result.stdout
        assert "secret False" in result.stdout, result


def test_background_processes_do_not_outlive_their_cell(sandbox: Sandbox) -> None:
    # A marker unique to this run: the process backend shares the host's /proc with other test runs.
    marker = f"1234.{os.getpid()}{time.monotonic_ns() % 100000}"
    code = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        f"os.system('sleep {marker} &')\n"
        f"if os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '{marker}'])\n"
        "print('spawned')"
    )
    assert run_contained(sandbox, code, 5.0).stdout == "spawned\n"
    probe = (
        "import glob\nn = 0\n"
        "for p in glob.glob('/proc/[0-9]*/cmdline'):\n"
        f"    try:\n        n += b'{marker}' in open(p, 'rb').read()\n"
        "    except OSError:\n        pass\n"
        "print(n)"
    )
    assert sandbox.run_python(probe, 5).stdout == "0\n"


def test_reading_proc_1_environ_leaks_nothing(sandbox: Sandbox) -> None:
    code = "try:\n    print(open('/proc/1/environ', 'rb').read())\nexcept OSError as e:\n    print('denied', e)"
    result = run_contained(sandbox, code, 5.0)
    for secret in ("DOCKER", "TOKEN", "KEY", "PASSWORD", "SECRET"):
        assert secret not in result.stdout.upper()


def test_killing_the_session_server_recovers(sandbox: Sandbox) -> None:
    result = run_contained(sandbox, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", 5.0)
    assert result.restarted and "restarted" in result.note


def test_forged_giant_frame_to_the_host_is_refused(sandbox: Sandbox) -> None:
    # A cell that reaches the supervisor's stdout (possible via /proc for a same-uid pipe) must not make
    # the host allocate gigabytes: the channel refuses oversized frames and restarts the sandbox.
    code = (
        "import os, struct\n"
        "with open(f'/proc/{os.getppid()}/fd/1', 'wb') as fh:\n"
        "    fh.write(struct.pack('>I', 2**31) + b'x' * 64)\n"
        "import time; time.sleep(1)"
    )
    result = run_contained(sandbox, code, 5.0)
    assert result.restarted or result.exit_code == 1, result


def test_worker_killed_between_cells_by_its_own_thread(sandbox: Sandbox) -> None:
    code = "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(1))).start()\nx = 1"
    assert run_contained(sandbox, code, 5.0).exit_code == 0
    time.sleep(2.0)  # the thread (0.2 s) has killed the session process by now, even on a loaded host
    result = sandbox.run_python("print('next')", 5)
    assert result.stdout == "next\n" and result.restarted
