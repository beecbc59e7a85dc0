"""Grades one attack in a fresh interpreter, optionally with the grading package as landed before issue 30.

Run by tests/envs/test_reward_hacks_round2.py (as another uid where it tests a non-root trainer):
    python attack_runner.py '{"landed": DIR|null, "sandbox": {"kind": "process"}, "task": {...}, "solution": "...",
                              "require_host_isolation": true, "per_test_timeout_s": 1.0}'
``landed`` is a directory holding ``envs/code_exec/grading`` of an older commit: that package replaces this
tree's. Prints one JSON object: fraction, flags ([kind, source]), errors, raised ("Type: message" or null).
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from typing import Any


def grading_package(landed: str | None) -> Any:
    """This tree's grading package, or the landed one in its place."""
    import envs.code_exec as code_exec

    if landed is None:
        return importlib.import_module("envs.code_exec.grading")
    for name in [name for name in sys.modules if name.startswith("envs.code_exec.grading")]:
        del sys.modules[name]
    code_exec.__path__.insert(0, f"{landed}/envs/code_exec")
    package = importlib.import_module("envs.code_exec.grading")
    assert package.__file__ is not None and package.__file__.startswith(landed), package.__file__
    return package


def main() -> None:
    args = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")
    grading = grading_package(args.get("landed"))
    from envs.code_exec.tasks import CodingTask
    from sandboxes import make_sandbox

    task = CodingTask(**args["task"])
    options: dict[str, Any] = {"per_test_timeout_s": args.get("per_test_timeout_s", 1.0)}
    if args.get("landed") is None:
        options["require_host_isolation"] = args.get("require_host_isolation", True)
    out: dict[str, Any] = {"raised": None}
    with make_sandbox(args.get("sandbox", {"kind": "process"})) as sandbox:
        with grading.Grader(grading.GraderConfig(**options)) as grader:
            try:
                result = grader.grade(sandbox, task, args["solution"])
                out.update(
                    fraction=result.fraction,
                    flags=[[flag.kind, flag.source] for flag in result.flags],
                    errors=result.errors,
                )
            except Exception as exc:  # noqa: BLE001 - what the caller checks: the grading raised
                out["raised"] = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
