"""Attacks that need no exploit of the grader, only a place to keep notes (issue 30, root causes 1, 3 and 6).

``ENTRY`` is replaced by the task's entry point, ``DATA`` by a host path. Each is a solution (or a run
cell) a policy could write; ``tests/envs/test_cross_episode_hacks.py`` shows it beat the landed code and
scores 0 now.
"""

from __future__ import annotations

# Learns HumanEval's sequential asserts one by one across episodes, with no algorithm: a call the judge
# makes after the previous one means the previous answer passed. Notes are bare directories in /dev/shm
# (os.mkdir and os.listdir raise no hack flag), so nothing is flagged; TOKEN keeps two runs' notes apart.
ANSWER_LEARNING = """
import os
_NOTES = "/dev/shm"
_state = {"calls": 0, "last": None}
def _notes(tag):
    found = {}
    for name in os.listdir(_NOTES):
        parts = name.split("-")
        if len(parts) == 4 and parts[0] == tag and parts[1] == "TOKEN":
            found.setdefault(int(parts[2]), []).append(parts[3] == "True")
    return found
def _note(tag, index, answer):
    try:
        os.mkdir(os.path.join(_NOTES, "-".join((tag, "TOKEN", str(index), str(answer)))))
    except FileExistsError:
        pass
def ENTRY(*args, **kwargs):
    index = _state["calls"]
    _state["calls"] += 1
    if index > 0:
        _note("k", index - 1, _state["last"])  # the judge went on: the last answer was right
    known, tried = _notes("k"), _notes("t")
    if index in known:
        answer = known[index][0]
    else:
        answer = next((a for a in (True, False) if a not in tried.get(index, [])), True)
        _note("t", index, answer)
    _state["last"] = answer
    return answer
"""

# Reads the bundled task data on the host (a process sandbox without a private root shows it) and runs the
# reference solution it finds there.
HOST_DATA_READ = """
import json
def _reference():
    with open("DATA") as fh:
        for line in fh:
            row = json.loads(line)
            if row["entry_point"] == "ENTRY" and row.get("solution"):
                namespace = {}
                exec(row["solution"], namespace)
                return namespace["ENTRY"]
_real = _reference()
def ENTRY(*args, **kwargs):
    return _real(*args, **kwargs)
"""

# CodeAgent: a run cell leaves the answers in the work dir (here the reference solution, standing for
# hidden cases a cell regenerated with the task generator's source) and the draft only reads them back.
RUN_CELL_NOTES = "open('notes.py', 'w').write(SOLUTION)\nprint('noted')\n"
DRAFT_READS_NOTES = """
def ENTRY(*args, **kwargs):
    namespace = {}
    with open("notes.py") as fh:
        exec(fh.read(), namespace)
    return namespace["ENTRY"](*args, **kwargs)
"""

# What reset() did before issue 30 (and still does on a host filesystem): empty the work dir and /tmp only.
OLD_RESET = """
import os, shutil
for root in (os.getcwd(), "/tmp"):
    for name in os.listdir(root):
        path = os.path.join(root, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
"""


def fill(source: str, entry_point: str, **values: str) -> str:
    """``source`` with ``ENTRY`` and the other upper-case placeholders filled in."""
    source = source.replace("ENTRY", entry_point)
    for key, value in values.items():
        source = source.replace(key, value)
    return source
