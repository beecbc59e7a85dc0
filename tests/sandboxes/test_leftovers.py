"""Nothing a sandbox's code leaves behind outlives it, and no input makes a reset fail open, raise or stall.

Each test is an attack a policy could write into a cell: a process that outlives the kills (by killing its
supervisor, or by tracing it), a tree too deep for a recursive delete, more entries than a reset can erase in
bounded time, a write that fills the host's disk. On the code before single-use grading sandboxes, host-side
kills and bounded mounts, each of them succeeded (a survivor, a raised ``RecursionError``, an unbounded count).
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandboxes import ProcessSandbox, ProcessSandboxConfig, Sandbox, SandboxPool, make_sandbox

ConfigFactory = Callable[..., Any]  # the `config_for` fixture
MiB = 1024 * 1024


@pytest.fixture
def fresh(backend: str, config_for: ConfigFactory) -> Iterator[Callable[..., Sandbox]]:
    """``fresh(**limits)``: a new sandbox of the backend (closed after the test), not the shared warm one."""
    made: list[Sandbox] = []

    def make(**overrides: object) -> Sandbox:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the process backend's "weaker isolation" notice
            sandbox = make_sandbox(config_for(backend, **overrides))
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


def running_with_argv(argv: list[str]) -> list[int]:
    """Host pids (the host sees every container's processes too) running exactly ``argv``, zombies excluded."""
    wanted, found = b"\0".join(arg.encode() for arg in argv) + b"\0", []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if cmdline == wanted and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _private_uid_or_docker(sandbox: Sandbox) -> None:
    if isinstance(sandbox, ProcessSandbox) and sandbox._uid_lease is None:
        pytest.skip("host-side kills need a private uid: start the tests as root")


# ---- a process that outlives its sandbox's reset ------------------------------------------------------------------
def test_a_process_that_killed_its_supervisor_does_not_outlive_the_restart(fresh: Callable[..., Sandbox]) -> None:
    sandbox = fresh()
    _private_uid_or_docker(sandbox)
    argv = ["sleep", str(4000 + uuid.uuid4().int % 1000)]
    escape = (
        "import os, signal, subprocess\n"
        f"subprocess.Popen({argv!r}, start_new_session=True)\n"
        "os.kill(os.getppid(), signal.SIGKILL)  # the supervisor: its sweep never runs\n"
    )
    result = sandbox.run_python(escape, 10)
    assert result.restarted  # the session was lost and restarted by the host
    assert running_with_argv(argv) == [], "a process of the old session lives on next to the new one"
    assert sandbox.run_python("print(1 + 1)", 5).stdout == "2\n"


def test_the_supervisor_cannot_be_traced_by_the_code_it_supervises(fresh: Callable[..., Sandbox]) -> None:
    sandbox = fresh()
    _private_uid_or_docker(sandbox)
    seize = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "supervisor = os.getppid()\n"
        "child = os.fork()\n"
        "if child == 0:  # PTRACE_SEIZE does not stop the tracee; the tracer's exit detaches it\n"
        "    os._exit(0 if libc.ptrace(0x4206, supervisor, None, None) == 0 else ctypes.get_errno())\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))\n"
    )
    errno = int(sandbox.run_python(seize, 10).stdout)
    assert errno != 0, "the cell attached to its supervisor: it could rewrite its kills and replies"
    assert sandbox.run_python("print(3)", 5).stdout == "3\n"


# ---- kernel state: a network namespace lives as long as its sandbox ------------------------------------------------
TIME_WAIT = """
import socket
server = socket.socket()
try:
    server.bind(("127.0.0.1", {port}))
    server.listen()
    client = socket.create_connection(("127.0.0.1", {port}))
    peer, _ = server.accept()
    client.close()  # the active closer keeps the connection in TIME_WAIT for a minute, with no process behind it
    peer.close()
    print("left")
except OSError as exc:
    print(exc.errno)
finally:
    server.close()
"""
SEE = "print(':%04X' % {port} in open('/proc/net/tcp').read())"


def _leave_connection_state(sandbox: Sandbox, port: int) -> None:
    made = sandbox.run_python(TIME_WAIT.format(port=port), 10).stdout.strip()
    if made == str(101):  # ENETUNREACH: the process backend's new network namespace has its loopback down
        pytest.skip("the sandbox's loopback is down: no connection can be made, so none can be left")
    assert made == "left", made


def test_a_single_use_pool_never_shows_one_callers_connection_state_to_the_next(
    backend: str, config_for: ConfigFactory
) -> None:
    port = 40000 + uuid.uuid4().int % 20000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pool = SandboxPool(config_for(backend), 1, single_use=True)
    with pool:
        with pool.session() as first:
            _leave_connection_state(first, port)
            assert first.run_python(SEE.format(port=port), 5).stdout == "True\n"  # the state is there to find
            first_id = id(first)
        with pool.session(timeout_s=60) as second:
            assert id(second) != first_id
            assert second.run_python(SEE.format(port=port), 5).stdout == "False\n"
        assert pool.handed_out == 2 and pool.started >= 2


def test_a_reused_sandbox_keeps_connection_state_across_reset(backend: str, config_for: ConfigFactory) -> None:
    """Why grading sandboxes are single-use: a reset cannot clear what the kernel keeps per network namespace."""
    port = 40000 + uuid.uuid4().int % 20000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sandbox = make_sandbox(config_for(backend))
    with sandbox:
        _leave_connection_state(sandbox, port)
        sandbox.reset()
        assert sandbox.run_python(SEE.format(port=port), 5).stdout == "True\n"


# ---- resets that fail on odd input, or stall -----------------------------------------------------------------------
DEEP = """
import os
start = os.getcwd()
for _ in range({depth}):
    os.mkdir("d")
    os.chdir("d")
open("bottom.txt", "w").write("x")
os.chmod(".", 0)  # and locked at the bottom
os.chdir(start)
"""


def test_a_tree_deeper_than_the_stack_is_erased_by_reset(fresh: Callable[..., Sandbox]) -> None:
    sandbox = fresh()
    sandbox.run_python(DEEP.format(depth=2500), 30)
    for place in ("/tmp", "/dev/shm"):
        sandbox.run_python(f"import os\nos.chdir({place!r})\n" + DEEP.format(depth=1500), 30)
    sandbox.reset()  # raised RecursionError (process backend) before
    left = "import os\nprint(os.listdir('.'), [n for n in os.listdir('/tmp') + os.listdir('/dev/shm') if n == 'd'])"
    assert sandbox.run_python(left, 5).stdout == "[] []\n"


MANY = """
import os
made = 0
for i in range(60000):
    try:
        os.mkdir("{place}/e%d" % i)
    except OSError:
        break
    made += 1
print(made)
"""


@pytest.mark.parametrize("place", ["/sandbox", "/tmp", "/dev/shm"])
def test_every_writable_mount_holds_at_most_max_inodes_entries(fresh: Callable[..., Sandbox], place: str) -> None:
    sandbox = fresh(max_inodes=2048)
    made = int(sandbox.run_python(MANY.format(place=place), 60).stdout)
    assert 0 < made <= 2048  # 60,000 before: a reset then had 60,000 entries to erase inside env.step
    sandbox.reset()
    assert sandbox.run_python(f"import os\nprint(len(os.listdir({place!r})))", 5).stdout == "0\n"


FILL = """
import os
written = 0
for i in range(48):
    try:
        with open("{place}/fill%d" % i, "wb") as fh:
            fh.write(b"x" * (1 << 20))
    except OSError:
        break
    written += 1
print(written)
"""


@pytest.mark.parametrize("place", ["/sandbox", "/tmp"])
def test_the_work_dir_and_tmp_are_bounded_in_size(fresh: Callable[..., Sandbox], place: str) -> None:
    sandbox = fresh(workdir_size_bytes=8 * MiB, tmp_size_bytes=8 * MiB)
    written = int(sandbox.run_python(FILL.format(place=place), 60).stdout)
    assert written <= 8  # the process backend's /tmp and /sandbox were host dirs: it wrote all 48 MiB there
    sandbox.reset()
    assert sandbox.run_python(f"import os\nprint(os.listdir({place!r}))", 5).stdout == "[]\n"


ADD_KEY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(248, b"user", b"agentrl-note", b"hidden input", 12, -4)  # add_key to the user keyring
print(key > 0)
"""
SEE_KEY = "print('agentrl-note' in open('/proc/keys').read())"
# KEYCTL_SEARCH of the user keyring: the key's id while it is linked there, -1 once the keyring was cleared.
FIND_KEY = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall(250, 10, -4, b"user", b"agentrl-note", 0) > 0)
"""


def test_a_key_in_the_uids_keyring_does_not_reach_the_next_holder_of_the_uid() -> None:
    """The user keyring belongs to the uid, not to a namespace: the host clears it with the uid's processes."""
    if os.geteuid() != 0:
        pytest.skip("private uids need a root trainer")
    config = ProcessSandboxConfig(private_uid_first=1_960_000_000, private_uid_count=1)  # the same uid each time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with make_sandbox(config) as first:
            if first.run_python(ADD_KEY, 10).stdout != "True\n":
                pytest.skip("this kernel refuses add_key here")
            assert first.run_python(SEE_KEY, 5).stdout == "True\n"
        with make_sandbox(config) as second:
            assert second.run_python(SEE_KEY, 5).stdout == "False\n"  # True before: the key outlived the sandbox


def test_a_key_in_the_uids_keyring_does_not_survive_a_reset() -> None:
    if os.geteuid() != 0:
        pytest.skip("private uids need a root trainer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with make_sandbox(ProcessSandboxConfig()) as sandbox:
            if sandbox.run_python(ADD_KEY, 10).stdout != "True\n":
                pytest.skip("this kernel refuses add_key here")
            assert sandbox.run_python(FIND_KEY, 5).stdout == "True\n"
            sandbox.reset()
            assert sandbox.run_python(FIND_KEY, 5).stdout == "False\n"  # its description may show in /proc/keys
            # for about a second more, until the kernel collects the unlinked key
