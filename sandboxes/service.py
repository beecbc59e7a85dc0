"""SandboxService: a request/response process inside a sandbox, running Python source the host supplies.

The service reads length-prefixed UTF-8 request frames on its fd 0 and writes one reply frame per
request on its fd 1 (see ``sandboxes/session/service.py``). A timeout, a crash, an oversized reply or a
lost session ends the service and comes back as a ``ServiceReply`` describing it; the caller opens a new
service to continue. The one exception: a sandbox stopped from outside (``SandboxStoppedFromOutsideError``), which
says nothing about the code it ran.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandboxes.channel import SessionLostError
from sandboxes.errors import SandboxInputError, SandboxStoppedFromOutsideError
from sandboxes.validation import check_timeout


class ServiceHost(Protocol):
    """What a service needs of its sandbox (``sandboxes.base.Sandbox`` is one): named here, not imported, so
    that ``sandboxes.base`` can open services without the two modules importing each other."""

    config: Any

    def _service_op(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]: ...

    def _recover(self) -> str | None: ...


class ServiceReply(BaseModel):
    """The outcome of one request to a service: its reply text, or how the service ended."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str | None = Field(default=None, description="The reply frame (UTF-8 text); None when none came.")
    timed_out: bool = Field(default=False, description="The request ran past its timeout; the service was killed.")
    exit_code: int | None = Field(
        default=None, description="Exit status when the service ended during the request (minus the signal number)."
    )
    oom_killed: bool = Field(default=False, description="The service was killed for memory.")
    error: str = Field(default="", description="Why no reply came: ended, oversized reply, unknown service, lost.")
    stderr: str = Field(default="", description="What the service wrote to its stderr during the request (capped).")
    oversized: bool = Field(default=False, description="The reply exceeded max_read_bytes; the service was killed.")
    duration_s: float = Field(default=0.0, description="Seconds the request took, measured in the sandbox.")
    lost: bool = Field(default=False, description="The whole sandbox session was lost and restarted meanwhile.")

    @property
    def ok(self) -> bool:
        """True when a reply came (the service is still running)."""
        return self.text is not None


class SandboxService:
    """A handle on one service process in a sandbox; ``request`` sends text and returns the reply."""

    def __init__(self, sandbox: ServiceHost, source: str) -> None:
        if not isinstance(source, str):
            raise SandboxInputError(f"service source must be a str of Python code, got {type(source).__name__}")
        self._sandbox = sandbox
        try:
            self.service_id: str | None = sandbox._service_op({"op": "service_start", "source": source})["service"]
        except SessionLostError as exc:
            _recover_or_raise(sandbox, exc)
            raise

    @property
    def alive(self) -> bool:
        """False once the service ended (timeout, crash, close, sandbox reset seen by a request)."""
        return self.service_id is not None

    def request(self, text: str, timeout_s: float) -> ServiceReply:
        """Send ``text`` and wait up to ``timeout_s`` for the reply; a service that ended answers at once.

        Raises SandboxStoppedFromOutsideError when the sandbox died for a reason outside its code (no verdict)."""
        if not isinstance(text, str):
            raise SandboxInputError(f"a service request must be a str, got {type(text).__name__}")
        timeout = check_timeout(timeout_s)
        if self.service_id is None:
            return ServiceReply(error="the service has ended: open a new one")
        request = {"op": "service_call", "service": self.service_id, "message": text, "timeout_s": timeout}
        try:
            reply = self._sandbox._service_op(request, timeout + self._sandbox.config.timeout_margin_s)
        except SessionLostError as exc:
            self.service_id = None
            _recover_or_raise(self._sandbox, exc)
            return ServiceReply(error=f"the sandbox session was lost ({exc}) and restarted", lost=True)
        fields: dict[str, Any] = {key: reply[key] for key in ServiceReply.model_fields if reply.get(key) is not None}
        fields["text"] = reply.get("reply")
        try:
            result = ServiceReply(**fields)
        except ValidationError as exc:  # the supervisor shares the sandbox with untrusted code: check its replies
            result = ServiceReply(error=f"malformed service reply from the sandbox: {exc.errors()[0]['msg']}")
        if not result.ok:
            self.service_id = None
        return result

    def close(self) -> None:
        """End the service (idempotent; a lost session already ended it)."""
        if self.service_id is None:
            return
        service_id, self.service_id = self.service_id, None
        try:
            self._sandbox._service_op({"op": "service_stop", "service": service_id})
        except SessionLostError:
            self._sandbox._recover()


def _recover_or_raise(sandbox: ServiceHost, exc: SessionLostError) -> None:
    """Restart the sandbox after its session was lost; raise SandboxStoppedFromOutsideError when the loss came
    from outside it (then nothing about the code it ran can be concluded)."""
    outside = sandbox._recover()
    if outside is not None:
        raise SandboxStoppedFromOutsideError(f"the sandbox was restarted: {outside} ({exc})") from exc
