"""The grading boundary on honest solutions: Python's semantics survive the trip across it, exactly.

Tests run in the judge, the solution in a sandbox service; these check what tests can observe of the
solution (values with exact types, exceptions, generators, mutation, closures, objects, timeouts) and that
honest code raises no hack flag.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from envs.code_exec.grading import Grader, GraderConfig, GradeResult, GradingError
from envs.code_exec.grading.wire import (
    Decoder,
    Encoder,
    SolutionError,
    WireError,
    describe_exception,
    dumps,
    loads,
    rebuild_exception,
)
from envs.code_exec.tasks import CodingTask
from sandboxes import make_sandbox


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Any]:
    box = make_sandbox({"kind": "process"})
    yield box
    box.close()


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    with Grader(GraderConfig(per_test_timeout_s=1.0)) as grading:
        yield grading


def task(entry_point: str, *tests: str, prefix: str = "") -> CodingTask:
    return CodingTask(
        task_id="t/1", kind="t", prompt="-", entry_point=entry_point, tests=list(tests), code_prefix=prefix
    )


def run(grader: Grader, sandbox: Any, solution: str, entry_point: str, *tests: str, prefix: str = "") -> GradeResult:
    return grader.grade(sandbox, task(entry_point, *tests, prefix=prefix), solution)


VALUES = [
    None,
    True,
    False,
    0,
    1,
    -(10**3000),
    1.0,
    -0.0,
    float("inf"),
    float("-inf"),
    'é ✓\n"$"',
    [1, [2.5, "x"]],
    (1, (2,)),
    {"a": 1, 2: "b", (3, 4): [5]},
    {1, "two", (3,)},
    frozenset({1, 2}),
    b"\x00\xff",
    bytearray(b"ab"),
    complex(1.5, -2.0),
    Fraction(3, 7),
    Decimal("1.10"),
    {"$": "ref", "id": 1},  # a plain dict that looks like a tag stays a plain dict
]


def exact(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (1 and True, or 1 and 1.0, are not exact)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(exact, a, b))
    if isinstance(a, dict):
        return exact(list(a), list(b)) and exact(list(a.values()), list(b.values()))
    if isinstance(a, (set, frozenset)):
        return exact(sorted(a, key=repr), sorted(b, key=repr))
    return bool(a == b) and repr(a) == repr(b)


@pytest.mark.parametrize(
    "value", VALUES, ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(VALUES)]
)  # set reprs vary
def test_codec_round_trips_exact_types(value: Any) -> None:
    data = loads(dumps(Encoder(lambda v: pytest.fail(f"fallback for {v!r}")).encode(value)))
    back = Decoder(lambda ref: pytest.fail("no refs here")).decode(data)
    assert exact(back, value)
    nan = Decoder(lambda ref: None).decode(loads(dumps(Encoder(lambda v: None).encode(float("nan")))))
    assert type(nan) is float and math.isnan(nan)


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        '{"$": "set", "v": [[1]]}',  # an unhashable element
        '{"$": "tuple", "v": [1], "x": 2}',
        '{"$": "float", "v": "1.5"}',
        '{"$": "int", "v": "12"}',
        '{"$": "eval", "v": "1"}',
        '{"a": 1}',
        "[" * 300 + "]" * 300,  # deeper than the encoder ever sends (MAX_DEPTH)
    ],
)
def test_decoder_is_strict(text: str) -> None:
    with pytest.raises(WireError):
        Decoder(lambda ref: None).decode(loads(text))


def test_a_too_large_value_is_not_taken_for_tampering_and_malformed_flag_lines_are_tampering() -> None:
    from envs.code_exec.grading.monitor import FLAG_PREFIX
    from envs.code_exec.grading.solution_process import parse_flag_lines
    from envs.code_exec.grading.wire import MAX_NODES, WireSizeError

    with pytest.raises(WireSizeError):
        Decoder(lambda ref: None).decode([0] * MAX_NODES)
    bad = ["5", '["bogus", 1]', "[" * 100_000 + "]" * 100_000, "{", '["a", "b", "c"]']
    lines = [FLAG_PREFIX + '["introspection", "gc.get_objects"]', *(FLAG_PREFIX + b for b in bad), "x"]
    flags = parse_flag_lines("\n".join(lines))
    assert str(flags[0]) == "introspection: gc.get_objects" and flags[0].source == "runtime"
    assert [(f.kind, f.source) for f in flags[1:]] == [("channel_tampering", "host")] * len(bad)


def test_exceptions_cross_as_their_nearest_builtin_type() -> None:
    described = {"type": "MyError", "builtin": ["KeyError", "LookupError", "Exception"], "message": "k"}
    assert type(rebuild_exception(described)) is KeyError
    for raised in (StopIteration(), SystemExit(0), GeneratorExit(), KeyboardInterrupt()):
        assert type(rebuild_exception(describe_exception(raised))) is SolutionError
    with pytest.raises(WireError):
        rebuild_exception({"type": 3})


def test_values_keep_their_types_through_a_grading(grader: Grader, sandbox: Any) -> None:
    solution = (
        "def f(kind):\n    return {'bool': True, 'int': 1, 'float': 1.0, 'tuple': (1, 2), 'nan': float('nan')}[kind]\n"
    )
    tests = [
        "assert f('bool') is True",
        "assert type(f('int')) is int and f('int') == True",  # Python's 1 == True holds, the type is kept
        "assert type(f('float')) is float",
        "assert f('tuple') == (1, 2) and f('tuple') != [1, 2]",
        "import math\nassert math.isnan(f('nan')) and f('nan') != f('nan')",
    ]
    result = run(grader, sandbox, solution, "f", *tests)
    assert result.passed == [True] * 5 and result.flags == []


def test_exceptions_generators_mutation_closures_objects(grader: Grader, sandbox: Any) -> None:
    solution = (
        "class Stack:\n"
        "    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def pop(self):\n        return self.items.pop()\n"
        "    def __len__(self):\n        return len(self.items)\n"
        "def f(kind, arg=None):\n"
        "    if kind == 'raise':\n        raise ValueError('bad input')\n"
        "    if kind == 'gen':\n        return (i * i for i in range(arg))\n"
        "    if kind == 'sort':\n        arg.sort()\n        return None\n"
        "    if kind == 'adder':\n        return lambda y: arg + y\n"
        "    if kind == 'stack':\n        return Stack()\n"
    )
    tests = [
        "try:\n    f('raise')\n    raise AssertionError('no error')\n"
        "except ValueError as e:\n    assert 'bad input' in str(e)",
        "assert list(f('gen', 4)) == [0, 1, 4, 9] and f('gen', 4) != [0, 1, 4, 9]",
        "g = f('gen', 3)\nassert iter(g) is g and next(g) == 0 and sum(g) == 5",
        "xs = [3, 1, 2]\nf('sort', xs)\nassert xs == [1, 2, 3]",
        "assert f('adder', 2)(3) == 5",
        "s = f('stack')\ns.push(1)\ns.push(2)\nassert s.pop() == 2 and len(s) == 1",
        "assert f('stack') != f('stack')",  # references compare by identity
    ]
    result = run(grader, sandbox, solution, "f", *tests)
    assert result.passed == [True] * len(tests), result.errors
    assert result.flags == []


def test_a_looping_test_fails_alone_within_its_time(grader: Grader, sandbox: Any) -> None:
    solution = "calls = []\ndef f(x):\n    calls.append(x)\n    while x == 1:\n        pass\n    return len(calls)\n"
    start = time.monotonic()
    result = run(grader, sandbox, solution, "f", "assert f(0) == 1", "assert f(1) == 2", "assert f(2) == 1")
    # After the timeout the solution was reloaded (its state too, as a crashed process would lose it).
    assert result.passed == [True, False, True] and result.verdicts[1].timed_out
    assert time.monotonic() - start < 1.0 * 3 + 3.0


def test_honest_stdlib_use_raises_no_flag(grader: Grader, sandbox: Any) -> None:
    solution = (
        "import collections, dataclasses, logging, traceback, warnings\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "@dataclasses.dataclass\nclass Box:\n    v: int\n"
        "def f(x):\n"
        "    warnings.warn('careful')\n"
        "    logging.getLogger('x').warning('hi')\n"
        "    try:\n        1 / 0\n    except ZeroDivisionError:\n        traceback.format_exc()\n"
        "    print('x' * 100_000)\n"
        "    return [Point(x, x), collections.Counter('aab'), Box(1) == Box(1), sorted({x, 2})]\n"
    )
    result = run(grader, sandbox, solution, "f", "assert f(1) == [(1, 1), {'a': 2, 'b': 1}, True, [1, 2]]")
    assert result.passed == [True] and result.flags == [], result.flags


def test_grading_works_above_1024_open_descriptors() -> None:
    """The main job holds over 1024 descriptors (a hundred sandboxes): the judge's channel used select(), which
    refuses them, and every grading there was scored 0 and flagged instead of graded."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.skip(f"the hard limit of open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        box = make_sandbox({"kind": "process"})
        try:
            with Grader(GraderConfig(per_test_timeout_s=2.0)) as grading:
                result = run(grading, box, "def f(x):\n    return x + 1\n", "f", "assert f(1) == 2", "assert f(2) == 4")
        finally:
            box.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.passed == [True, False] and result.flags == [], (result.errors, result.flags)


def test_the_task_prefix_runs_on_the_trusted_side(grader: Grader, sandbox: Any) -> None:
    prefix = "def helper(x):\n    return x * 10\n\ndef f(x):\n"
    # The solution redefines the helper the tests use; the tests keep the task's own.
    solution = "    return helper(x)\n\ndef helper(x):\n    return 0\n"
    result = run(grader, sandbox, solution, "f", "assert helper(2) == 20", "assert f(2) == 0", prefix=prefix)
    assert result.passed == [True, True]
    with pytest.raises(GradingError, match="code_prefix"):  # loads in the sandbox, fails in the judge
        run(grader, sandbox, "def f(): pass", "f", "assert True", prefix="assert __name__ != '__judge__'\n")


def test_judge_limits_and_plain_data_only(grader: Grader, sandbox: Any) -> None:
    tests = [
        "f(lambda: 1)",  # only plain data crosses
        "assert f(None) is None",
    ]
    result = run(grader, sandbox, "def f(x):\n    return None\n", "f", *tests)
    assert result.passed == [False, True] and "cannot be passed" in result.errors[0]
    assert json.loads(result.model_dump_json())["verdicts"][1]["passed"] is True


def test_a_judge_that_cannot_read_its_stdlib_after_dropping_root_is_a_clear_error(sandbox: Any) -> None:
    import os
    import sys
    from pathlib import Path

    stdlib = Path(os.__file__).resolve().parent
    if os.geteuid() != 0 or all(os.stat(p).st_mode & 0o005 for p in (stdlib, *stdlib.parents)):
        pytest.skip("needs root and a Python whose stdlib other users cannot read (e.g. under /root)")
    with Grader(GraderConfig(judge_python=str(Path(sys.executable).resolve()))) as grader:
        with pytest.raises(GradingError, match="judge_python"):
            run(grader, sandbox, "def f():\n    return 1\n", "f", "assert f() == 1")


def test_sealed_frames_fail_when_forged_replayed_reordered_or_keyed_otherwise() -> None:
    from envs.code_exec.grading.seal import JOB, ChannelTampered, Sealer, job_key

    key = bytes(range(32))
    sender, receiver = Sealer(key, b"job>host"), Sealer(key, b"job>host")
    first, second = sender.seal(JOB, b'{"op":"test"}'), sender.seal(JOB, b'{"op":"verdict"}')
    forged = [
        second,  # out of order
        JOB + bytes(32) + b'{"op":"done"}',  # no key
        Sealer(job_key(key, b"other job"), b"job>host").seal(JOB, b'{"op":"test"}'),  # another job's key
        Sealer(key, b"host>job").seal(JOB, b'{"op":"test"}'),  # the other direction
        first[:-1] + b"!",  # altered body
    ]
    for frame in forged:
        with pytest.raises(ChannelTampered):
            receiver.open(frame)
    assert receiver.open(first) == b'{"op":"test"}'
    with pytest.raises(ChannelTampered):
        receiver.open(first)  # replayed
    assert receiver.open(second) == b'{"op":"verdict"}'


def test_the_judges_key_is_not_in_its_argv_or_environment(grader: Grader, sandbox: Any) -> None:
    import os

    assert run(grader, sandbox, "def f():\n    return 1\n", "f", "assert f() == 1").passed == [True]
    judge = grader._judge
    assert judge._proc is not None and len(judge._key) == 32
    seen = b""
    for name in ("cmdline", "environ"):
        try:
            with open(f"/proc/{judge._proc.pid}/{name}", "rb") as fh:
                seen += fh.read()
        except PermissionError:  # not root: the non-dumpable judge's environ is root's to read
            assert os.geteuid() != 0
    assert seen and judge._key not in seen and judge._key.hex().encode() not in seen
