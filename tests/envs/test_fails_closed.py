"""The process backend's minimal root, and grading failing closed where the kernel cannot give one (issue 30, 3).

The refusals are real: a root trainer without CAP_SYS_ADMIN (a container's default) cannot make a mount
namespace, and a non-root trainer in a user namespace whose ``max_user_namespaces`` is 0 (what a
container's seccomp profile or a hardened host gives) cannot make a user namespace. In both, the sandbox
runs on the host's filesystem, says so in ``isolation_error``, and grading raises ``UnsafeSandboxError``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes import make_sandbox

ROOT = Path(__file__).resolve().parents[2]
EASY_DATA = ROOT / "envs" / "data" / "easy_tasks.jsonl"
PROBE = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
from sandboxes import make_sandbox
from envs.code_exec.grading import Grader, UnsafeSandboxError
from envs.code_exec.tasks import load_tasks
out = {{}}
with make_sandbox({{"kind": "process"}}) as sandbox:
    out["error"] = sandbox.isolation_error
    out["sees_host"] = sandbox.run_python("import os; print(os.path.exists({str(EASY_DATA)!r}))", 10).stdout.strip()
    task = load_tasks("easy")[0]
    try:
        with Grader() as grader:
            out["graded"] = grader.grade(sandbox, task, "\\n" + task.solution).fraction
    except UnsafeSandboxError as exc:
        out["graded"] = "refused: " + str(exc)
print(json.dumps(out))
"""
# Runs PROBE (argv[1]) with the interpreter argv[2] as uid 65534 inside a user namespace (uids 0 and 65534 mapped)
# whose max_user_namespaces is 0.
NOBODY_WITHOUT_USERNS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
go_r, go_w = os.pipe()
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:
        os._exit(90)
    os.write(ready_w, b"u")
    os.read(go_r, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    os.chdir("/tmp")
    os.execv(sys.argv[2], [sys.argv[2], "-c", sys.argv[1]])
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open("/proc/%d/%s" % (pid, name), "w") as fh:
        fh.write("0 0 1\\n65534 65534 1\\n")
os.write(go_w, b"g")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="builds the refusing kernel set-up with root's powers")


def _probe(argv: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    if env is None:
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TMPDIR")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, cwd="/tmp")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_solution_sees_a_minimal_root() -> None:
    with make_sandbox({"kind": "process"}) as sandbox:
        if sandbox.isolation_error:
            pytest.skip(f"this kernel refuses the minimal root here ({sandbox.isolation_error}): see the tests below")
        cell = (
            "import json, os, sys, sysconfig\n"
            "paths = [p for p in sys.path if p.endswith(('site-packages', 'dist-packages')) and os.path.isdir(p)]\n"
            f"host = [{str(ROOT)!r}, {str(EASY_DATA)!r}, {sys.prefix!r}, {os.path.dirname(os.__file__)!r}]\n"
            "try:\n    open('/usr/probe', 'w')\n    wrote = True\nexcept OSError:\n    wrote = False\n"
            "print(json.dumps({'root': sorted(os.listdir('/')), 'packages': [os.listdir(p) for p in paths],"
            " 'host': [os.path.exists(p) for p in host], 'wrote_usr': wrote}))"
        )
        seen = json.loads(sandbox.run_python(cell, 10).stdout)
    assert set(seen["root"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc"} | {
        "sandbox",
        "tmp",
    }
    assert all(listing == [] for listing in seen["packages"])  # datasets installed as packages are hidden
    # The repo (task data, generator source) and the trainer's environment are not there; the stdlib may be.
    assert seen["host"][:3] == [False, False, False] and not seen["wrote_usr"]


def test_private_root_off_shows_the_host_and_says_so() -> None:
    with make_sandbox({"kind": "process", "private_root": False}) as sandbox:
        assert sandbox.isolation_error == "ProcessSandboxConfig.private_root is off"
        assert sandbox.run_python(f"print(open({str(EASY_DATA)!r}).read(30))", 10).stdout.startswith('{"task_id"')


@root_only
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux) to drop CAP_SYS_ADMIN")
def test_root_without_cap_sys_admin_fails_closed() -> None:
    drop = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin"]
    seen = _probe([*drop, sys.executable, "-c", PROBE])
    assert "unshare" in str(seen["error"]) and seen["sees_host"] == "True"
    assert str(seen["graded"]).startswith("refused: refusing to grade"), seen
    assert "Fix: use the Docker backend" in str(seen["graded"])


@root_only
def test_non_root_without_user_namespaces_fails_closed() -> None:
    from other_uid import python_for_uid

    nobody_python, env = python_for_uid(65534)
    seen = _probe([sys.executable, "-c", NOBODY_WITHOUT_USERNS, PROBE, nobody_python], env)
    assert "unshare" in str(seen["error"]) and seen["sees_host"] == "True"
    assert str(seen["graded"]).startswith("refused: refusing to grade"), seen
