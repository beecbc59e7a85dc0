"""Process sandboxes started as root each run as a private, leased uid (sandboxes/uid_lease.py).

The fault these guard against was seen in CI: a process sandbox measured its RLIMIT_NPROC headroom for the
shared uid 65534, Docker containers (also uid 65534 on the host) started afterwards on the other test worker,
and the sandbox's next fork failed with EAGAIN.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandboxes import ProcessSandboxConfig, make_sandbox
from sandboxes.errors import SandboxStartError
from sandboxes.uid_lease import UidLease, processes_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uids are dropped only when started as root")
FIRST = 1_950_000_000  # a range of its own, apart from the default one other tests lease from


@pytest.fixture
def lock_dir(tmp_path: Path) -> str:
    path = tmp_path / "locks"
    path.mkdir(mode=0o700)
    return str(path)


@pytest.fixture
def strangers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes of uid 65534 (as a container's are on the host), killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _as_uid(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def test_concurrent_sandboxes_get_distinct_uids_and_cannot_touch_each_other() -> None:
    config = ProcessSandboxConfig(private_uid_first=FIRST, private_uid_count=8)
    with make_sandbox(config) as first, make_sandbox(config) as second:
        uid_1 = int(first.run_python("import os; print(os.getuid())", 5).stdout)
        uid_2 = int(second.run_python("import os; print(os.getuid())", 5).stdout)
        assert FIRST <= uid_1 < FIRST + 8 and FIRST <= uid_2 < FIRST + 8 and uid_1 != uid_2
        first.write_files({"secret.txt": "first's"})
        pid = int(first.run_python("import subprocess; print(subprocess.Popen(['sleep', '60']).pid)", 5).stdout)
        # Each sees only its own root, so reach the other's work dir through its process: the uids keep it out.
        peek = second.run_python(f"open('/proc/{pid}/cwd/secret.txt').read()", 5)
        assert "PermissionError" in peek.stderr
        signal_it = second.run_python(f"import os; os.kill({pid}, 9)", 5)
        assert "PermissionError" in signal_it.stderr
        assert processes_of(uid_1) >= 2  # the session server and the sleep live on


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned_65534_fails", "private_uid_works"])
def test_a_fork_after_strangers_of_uid_65534_start(pinned: bool, strangers: list) -> None:
    config = ProcessSandboxConfig(
        private_uid_first=FIRST, private_uid_count=8, max_processes=8, run_as_uid=65534 if pinned else None
    )
    with make_sandbox(config) as sandbox:
        for _ in range(12):  # more than the sandbox's headroom, started after it measured it
            strangers.append(subprocess.Popen(["sleep", "60"], preexec_fn=lambda: _as_uid(65534)))
        result = sandbox.run_python("import subprocess; print(subprocess.run(['true']).returncode)", 10)
    if pinned:  # the fault as CI saw it: the shared uid's count rose under the sandbox's fixed limit
        assert "Resource temporarily unavailable" in result.stderr, result
    else:
        assert result.stdout == "0\n", result.stderr


def test_close_releases_the_uid_and_a_killed_holder_releases_it_too(lock_dir: str) -> None:
    lease = UidLease(FIRST, 2, lock_dir)
    assert lease.uid == FIRST
    assert UidLease(FIRST, 2, lock_dir).uid == FIRST + 1  # the held one is skipped (and this one is released)
    lease.release()
    lease.release()  # idempotent
    again = UidLease(FIRST, 1, lock_dir)
    assert again.uid == FIRST
    again.release()

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from sandboxes.uid_lease import UidLease
                lease = UidLease({FIRST}, 1, {lock_dir!r})
                print(lease.uid, flush=True)
                time.sleep(60)
            """),
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert holder.stdout is not None and int(holder.stdout.readline()) == FIRST
    with pytest.raises(SandboxStartError, match="private_uid_count"):
        UidLease(FIRST, 1, lock_dir)
    holder.kill()
    holder.wait()
    UidLease(FIRST, 1, lock_dir).release()  # the kernel dropped the dead holder's lock


def test_a_uid_that_still_owns_processes_is_skipped(lock_dir: str, strangers: list) -> None:
    strangers.append(subprocess.Popen(["sleep", "60"], preexec_fn=lambda: _as_uid(FIRST)))
    lease = UidLease(FIRST, 2, lock_dir)
    assert lease.uid == FIRST + 1
    lease.release()


def test_a_lock_dir_that_is_a_link_or_open_to_others_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(SandboxStartError, match="not a private directory"):
        UidLease(FIRST, 1, str(tmp_path / "link"))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SandboxStartError, match="run_as_uid"):
        UidLease(FIRST, 1, str(shared))


def test_a_pinned_uid_is_used_as_given() -> None:
    with make_sandbox(ProcessSandboxConfig(run_as_uid=65534)) as sandbox:
        assert sandbox.run_python("import os; print(os.getuid())", 5).stdout == "65534\n"
