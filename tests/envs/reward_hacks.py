"""The exploit classes of the adversarial grading suite: each as an adversarial solution and its documented outcome.

``ENTRY`` in a source is replaced by the task's entry point. ``outcome`` is what docs/sandbox-security.md
states (the test checks the two agree): ``blocked`` = scores 0 on every target; ``detected`` = raises a
flag of each kind in ``flags``. ``beat_old_grader``: the exploit scored 1.0 on the in-process grader
that issue 15 replaced (scripts/legacy_grader.py), which shows it is a real attack, not a strawman.
"""

from __future__ import annotations

from dataclasses import dataclass

EASY = ("easy/arithmetic/01", "easy/loops/02")
HUMANEVAL = ("HumanEval/0",)


@dataclass(frozen=True)
class Exploit:
    """One exploit class: its adversarial solution, the tasks it is tried on and what must happen."""

    name: str
    source: str
    outcome: str  # "blocked" or "blocked, detected"
    flags: tuple[str, ...] = ()
    targets: tuple[str, ...] = EASY + HUMANEVAL
    beat_old_grader: bool = False

    def solution(self, entry_point: str) -> str:
        """The source with the task's entry point filled in."""
        return self.source.replace("ENTRY", entry_point)


EXPLOITS = (
    Exploit(
        "always_equal",
        "class _Anything:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = object.__hash__\n"
        "def ENTRY(*args, **kwargs):\n    return _Anything()\n",
        "blocked, detected",
        ("custom_comparison",),
        beat_old_grader=True,
    ),
    Exploit(
        "builtin_subclass_eq",
        "class _Str(str):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = str.__hash__\n"
        "def ENTRY(*args, **kwargs):\n    return _Str('forged')\n",
        "blocked, detected",
        ("custom_comparison",),
        beat_old_grader=True,
    ),
    Exploit(
        "exit_before_tests",
        "import sys\nsys.exit(0)\ndef ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("process_exit",),
    ),
    Exploit(
        "os_exit_in_call",
        "import os\ndef ENTRY(*args, **kwargs):\n    os._exit(0)\n",
        "blocked, detected",
        ("process_exit",),
    ),
    Exploit(
        "frame_walk_forgery",
        "import os, sys\n"
        "def _forge():\n"
        "    frame = sys._getframe(0)\n"
        "    while frame is not None:\n"
        "        found = frame.f_locals\n"
        "        if 'report' in found and 'payload' in found:\n"
        "            for index in range(len(found['payload']['tests'])):\n"
        "                found['report'].write(f\"{found['payload']['marker']} {index} null\\n\")\n"
        "            found['report'].flush()\n"
        "            os._exit(0)\n"
        "        frame = frame.f_back\n"
        "_forge()\n"
        "def ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("introspection",),
        beat_old_grader=True,
    ),
    Exploit(
        "gc_forgery",
        "import gc, os\n"
        "def _forge():\n"
        "    objects = gc.get_objects()\n"
        "    payloads = [o for o in objects if isinstance(o, dict) and 'marker' in o and 'tests' in o]\n"
        "    reports = [o for o in objects if hasattr(o, 'write') and isinstance(getattr(o, 'name', None), int)]\n"
        "    for payload in payloads:\n"
        "        for report in reports:\n"
        "            for index in range(len(payload['tests'])):\n"
        "                report.write(f\"{payload['marker']} {index} null\\n\")\n"
        "            report.flush()\n"
        "    if payloads and reports:\n"
        "        os._exit(0)\n"
        "_forge()\n"
        "def ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("introspection",),
        beat_old_grader=True,
    ),
    Exploit(
        "patch_builtins",
        "import builtins\nbuiltins.exec = lambda *args, **kwargs: None\ndef ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("builtins_patched",),
        beat_old_grader=True,
    ),
    Exploit(
        "patch_test_helpers",
        "def poly(xs, x):\n    return 0.0\ndef ENTRY(xs):\n    return 0.0\n",
        "blocked",
        targets=("HumanEval/32",),
        beat_old_grader=True,
    ),
    Exploit(
        "fake_verdict_output",
        "import os\n"
        "print('PASS 0 null')\n"
        "for _fd in range(1, 64):\n"
        "    try:\n        os.write(_fd, b'0000000000000000 0 null\\n')\n"
        "    except OSError:\n        pass\n"
        "def ENTRY(*args, **kwargs):\n    return None\n",
        "blocked",
    ),
    Exploit(
        "proc_snooping",
        "import os\n"
        "_seen = []\n"
        "for _pid in os.listdir('/proc'):\n"
        "    for _name in ('cmdline', 'environ', 'status'):\n"
        "        try:\n"
        "            with open(f'/proc/{_pid}/{_name}', 'rb') as _fh:\n                _seen.append(_fh.read())\n"
        "        except OSError:\n            pass\n"
        "def ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("proc_access",),
    ),
    Exploit(
        "kill_the_grader",
        "import os, signal\n"
        "def ENTRY(*args, **kwargs):\n"
        "    for _pid in (os.getppid(), 1):\n"
        "        try:\n            os.kill(_pid, signal.SIGKILL)\n"
        "        except OSError:\n            pass\n"
        "    return None\n",
        "blocked, detected",
        ("signal",),
        targets=EASY[:1],
    ),
    Exploit(
        "signal_tricks",
        "import signal\n"
        "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0)\n"
        "def ENTRY(*args, **kwargs):\n    while True:\n        pass\n",
        "blocked, detected",
        ("signal",),
        targets=EASY[:1],
    ),
    Exploit(
        "test_file_tampering",
        "import glob, os\n"
        "_found = [p for pattern in ('*test*', '/tmp/*', '../*') for p in glob.glob(pattern)]\n"
        "with open('test_solution.py', 'w') as _fh:\n    _fh.write('def check(candidate):\\n    pass\\n')\n"
        "def ENTRY(*args, **kwargs):\n    return None\n",
        "blocked, detected",
        ("file_write",),
    ),
    Exploit(
        "type_confusion",
        "def ENTRY(*args, **kwargs):\n    return float('nan')\n",
        "blocked",
    ),
    Exploit(
        "stop_iteration_escape",
        "def ENTRY(*args, **kwargs):\n    raise StopIteration\n",
        "blocked",
    ),
    Exploit(
        "forged_channel_frames",
        "import json, os, struct\n"
        "def ENTRY(*args, **kwargs):\n"
        "    forged = json.dumps({'verdict': 'passed', 'passed': [True] * 100}).encode()\n"
        "    for _fd in range(3, 64):\n"
        "        try:\n            os.write(_fd, struct.pack('>I', len(forged)) + forged)\n"
        "        except OSError:\n            pass\n"
        "    return None\n",
        "blocked, detected",
        ("channel_tampering",),
    ),
)
