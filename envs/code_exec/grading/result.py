"""The typed outcome of grading: one verdict per hidden test, the hack flags raised, the time it took."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from agentrl.errors import AgentRLError

HackKind = Literal[
    "introspection",
    "process_exit",
    "custom_comparison",
    "proc_access",
    "file_write",
    "signal",
    "spawn",
    "native_code",
    "builtins_patched",
    "channel_tampering",
    "grading_error",
    "monitor_silenced",
    "unscannable_source",
]
HACK_KINDS: frozenset[str] = frozenset(get_args(HackKind))
# Kinds that void a grading whatever the env's settings: the verdicts could not be trusted (a channel carried
# something the honest parties never send) or were not all computed (grading itself failed).
VOIDING_KINDS: frozenset[str] = frozenset({"channel_tampering", "grading_error"})


class GradingError(AgentRLError, RuntimeError):
    """Grading could not run for a reason that is not the solution's (the task's prefix fails on the judge)."""


class GradingSetupError(GradingError):
    """Grading cannot run because of the task or the machine (a prefix that fails in the judge, a judge that cannot
    start): a person must fix it, so it is raised rather than scored."""


class HackFlag(BaseModel):
    """A signal of an attempted exploit: what kind, where it was seen, and a short detail."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: HackKind = Field(description="Exploit class, e.g. introspection, process_exit, custom_comparison.")
    detail: str = Field(description="What was seen (an audit event, a type name, a source line).")
    source: Literal["runtime", "static", "host"] = Field(
        description="runtime: the audit hook in the solution's process; static: its source; host: the relay."
    )

    @property
    def outside(self) -> bool:
        """Seen from outside the solution's interpreter (its source, the relay, the judge), so the solution cannot
        hide it; a ``runtime`` flag comes from the in-process monitor, which code that took over its interpreter
        can blind (advisory only)."""
        return self.source != "runtime"

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class TestVerdict(BaseModel):
    """The verdict on one hidden test, computed by the judge outside the sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    __test__ = False  # not a pytest test class

    index: int = Field(description="Position of the test in the task's list.")
    passed: bool = Field(description="The test ran to the end without an exception.")
    error: str | None = Field(None, description="What the test raised (or why it has no verdict).")
    timed_out: bool = Field(False, description="The test ran past its time limit.")


class GradeResult(BaseModel):
    """Outcome of grading one solution: per-test verdicts, hack flags, duration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verdicts: list[TestVerdict] = Field(description="One verdict per hidden test, in order.")
    flags: list[HackFlag] = Field(default_factory=list, description="Signals of attempted reward hacking.")
    duration_s: float = Field(0.0, description="Wall-clock seconds grading took.")

    @property
    def passed(self) -> list[bool]:
        """Per-test pass flags."""
        return [v.passed for v in self.verdicts]

    @property
    def errors(self) -> list[str]:
        """'test i: <error>' for each failed test."""
        return [f"test {v.index}: {v.error}" for v in self.verdicts if not v.passed]

    @property
    def timed_out(self) -> bool:
        """True when any test ran past its time limit."""
        return any(v.timed_out for v in self.verdicts)

    @property
    def fraction(self) -> float:
        """Fraction of tests passed (the code-exec reward)."""
        return sum(self.passed) / len(self.verdicts) if self.verdicts else 0.0

    @property
    def success(self) -> bool:
        """True when every test passed (what pass@k counts)."""
        return bool(self.verdicts) and all(self.passed)

    @property
    def flag_strings(self) -> list[str]:
        """The flags as 'kind: detail' strings (the env's ``info['hack_flags']``)."""
        return [str(flag) for flag in self.flags]
