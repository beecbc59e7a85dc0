"""ExecResult: the structured outcome of one cell or program run inside a sandbox."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ExecResult(BaseModel):
    """What a cell or program produced; a timeout, OOM kill or crash is a result, not an exception."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stdout: str = Field(default="", description="Captured stdout (UTF-8, capped inside the sandbox).")
    stderr: str = Field(default="", description="Captured stderr (tracebacks of a failing cell go here).")
    exit_code: int | None = Field(
        default=None,
        description="0 on success, 1 for an uncaught exception, N for sys.exit(N), minus the signal "
        "number when killed; None when the run timed out.",
    )
    timed_out: bool = Field(default=False, description="The wall-clock timeout fired and the run was killed.")
    oom_killed: bool = Field(default=False, description="The run hit the memory limit (OOM kill or MemoryError).")
    truncated: bool = Field(default=False, description="stdout or stderr exceeded max_output_bytes and was cut.")
    duration_s: float = Field(default=0.0, description="Wall-clock seconds of the run, measured in the sandbox.")
    restarted: bool = Field(
        default=False,
        description="The Python session was restarted after this run (timeout or crash): its state is gone.",
    )
    note: str = Field(default="", description="What the sandbox did to recover, for logs and the model.")

    @property
    def ok(self) -> bool:
        """True when the run finished by itself with exit code 0."""
        return self.exit_code == 0 and not self.timed_out
