"""The worst reset a cell can cause: every writable mount filled with empty directories to its inode limit.

A cell makes as many directories as each of the work dir, /tmp and /dev/shm takes (``max_inodes`` each; up to
``--dirs`` per mount where the limit is higher or absent, as before the limit existed), then ``reset()`` is timed.
JSON on stdout: per backend the directories made per mount and the reset's seconds. Usage:
    .venv/bin/python bench/bench_reset.py [--backend docker|process] [--dirs 60000] [--places /sandbox,/tmp]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

from sandboxes import docker_available, make_sandbox

MANY = """
import os
made = 0
for i in range({dirs}):
    try:
        os.mkdir("{place}/e%d" % i)
    except OSError:
        break
    made += 1
print(made)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("docker", "process"), default=None, help="Default: docker if usable.")
    parser.add_argument("--dirs", type=int, default=60000, help="Directories a cell tries to make per mount.")
    parser.add_argument("--places", default="/sandbox,/tmp,/dev/shm", help="Mounts to fill, comma-separated.")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # the process backend's isolation warning
    backend = args.backend or ("docker" if docker_available() else "process")
    report: dict[str, object] = {"backend": backend, "made": {}}
    with make_sandbox({"kind": backend}) as sandbox:
        for place in args.places.split(","):
            made = sandbox.run_python(MANY.format(dirs=args.dirs, place=place), 600).stdout.strip()
            report["made"][place] = int(made or 0)  # type: ignore[index]
        start = time.perf_counter()
        sandbox.reset()
        report["reset_s"] = round(time.perf_counter() - start, 3)
        report["empty_after"] = sandbox.run_python("import os\nprint(len(os.listdir('.')))", 10).stdout.strip() == "0"
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
