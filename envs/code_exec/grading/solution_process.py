"""The host's handle on the solution's sandbox service: load, forward the judge's requests, restart after a death.

Everything that comes back from the sandbox is untrusted text: it is forwarded to the judge unparsed
(the judge decodes it strictly), except the load answer and the flag lines, which are checked here.
Each restart is a new *generation*; references from an older one are answered as gone.
"""

from __future__ import annotations

import time
from typing import Any

from envs.code_exec.grading.monitor import BEAT_PREFIX, FLAG_PREFIX
from envs.code_exec.grading.result import HACK_KINDS, HackFlag
from envs.code_exec.grading.sources import solution_server_source
from envs.code_exec.grading.wire import WireError, dumps, loads


def parse_flag_lines(stderr: str) -> list[HackFlag]:
    """The flags the solution's audit hook wrote; a malformed line is itself a ``channel_tampering`` flag.

    The monitor writes only ``[kind, detail]`` with a known kind, so any other line after the prefix was
    written by the solution's own code (or a broken channel), and the grading is void either way.
    """
    flags = []
    for line in stderr.split("\n"):  # not splitlines(): the prefix starts with \x1e, a line break to it
        if line.startswith(FLAG_PREFIX):
            flags.append(_flag_of(line[len(FLAG_PREFIX) :]))
    return flags


def _flag_of(text: str) -> HackFlag:
    try:
        data = loads(text)
        if type(data) is list and len(data) == 2 and type(data[0]) is str and data[0] in HACK_KINDS:
            return HackFlag(kind=data[0], detail=str(data[1])[:200], source="runtime")
    except WireError:  # deep nesting, bad JSON: loads turns each into a WireError
        pass
    return HackFlag(kind="channel_tampering", detail=f"malformed flag line: {text[:80]!r}", source="host")


class SolutionProcess:
    """One solution loaded in a service of ``sandbox``; ``forward`` answers a judge request with reply fields."""

    def __init__(
        self,
        sandbox: Any,
        program: str,
        *,
        per_test_s: float,
        load_timeout_s: float,
        flags: list[HackFlag],
        budget_s: float | None = None,
    ) -> None:
        self.sandbox, self.program, self.flags = sandbox, program, flags
        self.per_test_s, self.load_timeout_s, self.budget_s = per_test_s, load_timeout_s, budget_s
        self.service: Any = None
        self.requests = 0  # sent to the running service: each answer must come with the monitor's beat
        self.gen = 0
        self.load_error: str | None = None
        self.deadline = 0.0  # of the running test
        self.budget_end: float | None = None  # of all tests, set when the first one starts
        self.budget_bound = False  # the running test's deadline is the budget's, not its own limit

    def begin_test(self) -> None:
        """A test starts: its calls share ``per_test_s`` from now, within what is left of the budget."""
        now = time.monotonic()
        if self.budget_s is not None and self.budget_end is None:
            self.budget_end = now + self.budget_s
        self.deadline = now + self.per_test_s
        self.budget_bound = self.budget_end is not None and self.budget_end < self.deadline
        if self.budget_bound:
            self.deadline = self.budget_end

    @property
    def limit_text(self) -> str:
        """The limit the running test is held to, in words."""
        if self.budget_bound:
            return f"the grading's budget of {self.budget_s:g} s for all tests"
        return f"limit {self.per_test_s:g} s per test"

    def start(self) -> str | None:
        """Open a fresh service and load the program; returns why loading failed, or None."""
        self.close()
        self.gen += 1
        self.service = self.sandbox.open_service(solution_server_source())
        self.requests = 1
        reply = self.service.request(dumps({"op": "load", "program": self.program}), self.load_timeout_s)
        self.note(reply, "while loading")
        if not reply.ok:
            self.load_error = "timed out" if reply.timed_out else (reply.error or "the solution's process ended")
        else:
            self.load_error = self._load_answer(reply.text)
        return self.load_error

    def _load_answer(self, text: str) -> str | None:
        try:
            answer = loads(text)
        except WireError:
            answer = None
        if answer == {"loaded": True}:
            return None
        raised = answer.get("raise") if isinstance(answer, dict) else None
        if isinstance(raised, dict) and isinstance(raised.get("type"), str):
            return f"{raised['type']}: {str(raised.get('message'))[:300]}"
        self.flags.append(HackFlag(kind="channel_tampering", detail="malformed load answer", source="host"))
        return "the solution's process sent a malformed answer"

    def forward(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply fields for one judge request: the service's text, or a failure the judge turns into an error."""
        if request.pop("gen", self.gen) != self.gen:
            return _failure("gone", "the object belongs to an earlier run of the solution, which ended")
        if self.deadline <= time.monotonic():  # before a reload: a spent budget restarts nothing
            return _failure("timeout", f"the test ran past its time limit ({self.limit_text})")
        if self.service is None or not self.service.alive:
            started = time.monotonic()
            if self.load_error is not None or self.start() is not None:
                return _failure("ended", f"the solution could not be (re)loaded: {self.load_error}")
            reload_s = time.monotonic() - started  # reloading after a crash is not the tests' time
            self.deadline += reload_s
            self.budget_end = None if self.budget_end is None else self.budget_end + reload_s
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return _failure("timeout", f"the test ran past its time limit ({self.limit_text})")
        self.requests += 1
        reply = self.service.request(dumps(request), remaining)
        self.note(reply, "during a call")
        if reply.ok:
            return {"text": reply.text}
        if reply.timed_out:
            return _failure("timeout", f"the solution timed out ({self.limit_text})")
        return _failure("ended", f"the solution's process ended: {reply.error or 'killed'}")

    def note(self, reply: Any, when: str) -> None:
        """Record the flag lines of a reply, and a process exit the solution caused."""
        self.flags.extend(parse_flag_lines(reply.stderr))
        if reply.ok and f"{BEAT_PREFIX}{self.requests}\n" not in reply.stderr:
            detail = f"no monitor beat with answer {self.requests} {when}: its channel was cut or redirected"
            self.flags.append(HackFlag(kind="monitor_silenced", detail=detail, source="host"))
        exited = reply.exit_code is not None and not (reply.oom_killed or reply.oversized or reply.timed_out)
        if reply.lost or exited:
            detail = "the sandbox session was lost" if reply.lost else f"exit status {reply.exit_code}"
            self.flags.append(HackFlag(kind="process_exit", detail=f"{detail} {when}", source="host"))

    def close(self) -> None:
        """End the service (idempotent)."""
        if self.service is not None:
            self.service.close()
            self.service = None


def _failure(kind: str, detail: str) -> dict[str, Any]:
    return {"failure": {"kind": kind, "detail": detail}}
