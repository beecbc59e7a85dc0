"""Nothing a sandbox's code writes survives reset(): not in any writable directory, not in System V IPC.

The probe finds every writable place itself (it walks the whole filesystem the sandbox sees, not a list we
expect), writes into each, and after a reset looks for all of it. A pooled sandbox is reset on release, so
this is what keeps one episode's notes (or the hidden inputs its grading saw) from the next (issue 30).
"""

from __future__ import annotations

import json

import pytest

from sandboxes import Sandbox

MARK = "agentrl-leftover"
WRITE_EVERYWHERE = f"""
import ctypes, json, os
skip = ("/proc", "/sys")
places, files = [], []
for top, dirs, names in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip]
    if os.access(top, os.W_OK):
        places.append(top)
    for name in names:
        path = os.path.join(top, name)
        if os.path.isfile(path) and not os.path.islink(path) and os.access(path, os.W_OK):
            files.append(path)
left = []
for place in places:
    try:
        with open(os.path.join(place, "{MARK}"), "w") as fh:
            fh.write("note")
        os.mkdir(os.path.join(place, "{MARK}-dir"))  # a bare directory is a note too
        left += [os.path.join(place, "{MARK}"), os.path.join(place, "{MARK}-dir")]
    except OSError:
        pass  # writable by its mode, refused by the kernel (a read-only mount): nothing was left
libc = ctypes.CDLL(None, use_errno=True)
ipc = [libc.shmget(0x5eed, 4096, 0o1600), libc.msgget(0x5eed, 0o1600), libc.semget(0x5eed, 1, 0o1600)]
print(json.dumps({{"places": places, "files": files, "left": left, "ipc": ipc}}))
"""
LOOK = """
import json, os
found = [p for p in {left!r} if os.path.lexists(p)]
ipc = {{}}
for kind in ("shm", "msg", "sem"):
    try:
        with open("/proc/sysvipc/" + kind) as fh:
            ipc[kind] = [line.split()[0] for line in fh.readlines()[1:]]
    except OSError:
        ipc[kind] = []
print(json.dumps({{"found": found, "ipc": ipc}}))
"""


def _private(sandbox: Sandbox) -> None:
    """Skip where the sandbox shows the host's filesystem: the probe would write all over the host."""
    if sandbox.isolation_error:
        pytest.skip(f"the sandbox runs on the host's filesystem ({sandbox.isolation_error}); test_jail covers that")


def test_nothing_written_anywhere_survives_a_reset(sandbox: Sandbox) -> None:
    _private(sandbox)
    wrote = sandbox.run_python(WRITE_EVERYWHERE, 60)
    assert wrote.ok, wrote
    before = json.loads(wrote.stdout)
    workdir = sandbox.run_python("import os; print(os.getcwd())", 5).stdout.strip()
    # The places the issue found and the ones every sandbox has, found by the walk itself.
    assert {workdir, "/tmp", "/dev/shm"} <= set(before["places"]), before["places"]
    assert all(i >= 0 for i in before["ipc"]), before["ipc"]  # shared memory, a message queue, semaphores exist
    # A writable regular file would be a note that reset cannot delete (only device nodes may be writable).
    assert [f for f in before["files"] if not f.startswith("/dev/")] == []
    assert len(before["left"]) >= 6
    sandbox.reset()
    after = json.loads(sandbox.run_python(LOOK.format(left=before["left"]), 30).stdout)
    assert after["found"] == []
    assert "0x00005eed" not in str(after["ipc"]) and str(0x5EED) not in str(after["ipc"]), after["ipc"]


def test_posix_message_queues_do_not_survive_a_reset(sandbox: Sandbox) -> None:
    _private(sandbox)
    made = sandbox.run_python(
        "import os\nfd = os.open('/dev/mqueue/agentrl-note', os.O_CREAT | os.O_RDWR, 0o600)\nprint(fd > 0)", 10
    )
    assert made.stdout.strip() == "True", made
    sandbox.reset()
    assert sandbox.run_python("import os; print(os.listdir('/dev/mqueue'))", 10).stdout.strip() == "[]"


def test_a_locked_directory_does_not_survive_a_reset(sandbox: Sandbox) -> None:
    _private(sandbox)
    locked = (
        "import os\nfor top in ('/dev/shm', '/tmp', '.'):\n"
        "    os.makedirs(top + '/locked/inner')\n    open(top + '/locked/inner/note', 'w').write('x')\n"
        "    os.chmod(top + '/locked/inner', 0)\n    os.chmod(top + '/locked', 0)\nprint('locked')"
    )
    assert sandbox.run_python(locked, 10).stdout.strip() == "locked"
    sandbox.reset()
    look = "import os; print([p for p in ('/dev/shm/locked', '/tmp/locked', 'locked') if os.path.lexists(p)])"
    assert sandbox.run_python(look, 10).stdout.strip() == "[]"
