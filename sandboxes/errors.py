"""The sandbox error tree: each error also subclasses the stdlib type callers already catch.

Messages name the failing value and the fix. `sandboxes` stands alone, so this mirrors (and does
not import) agentrl's error conventions.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every error raised by `sandboxes`."""


class SandboxConfigError(SandboxError, ValueError):
    """A sandbox config is invalid (a limit out of range, an unknown backend)."""


class SandboxInputError(SandboxError, ValueError, TypeError):
    """A call got bad input: a non-string cell, a timeout <= 0, an empty argv."""


class SandboxUnavailableError(SandboxError, RuntimeError):
    """The backend cannot run here: no Docker engine reachable, no Python interpreter."""


class ImageNotFoundError(SandboxError, LookupError):
    """The configured sandbox image is not present on the Docker engine."""


class SandboxStartError(SandboxError, RuntimeError):
    """A sandbox (container or session process) failed to start or answer its first ping."""


class SandboxCrashedError(SandboxError, RuntimeError):
    """The session inside a sandbox died and could not be recovered, or refused a request."""


class SandboxStoppedFromOutsideError(SandboxCrashedError):
    """The sandbox died for a reason no code inside it can cause (its container was killed or removed by the
    engine or a person): what ran in it has no verdict, and the work is retried elsewhere, never scored."""


class SandboxClosedError(SandboxError, RuntimeError):
    """An operation was called on a sandbox after close()."""


class SandboxPoolError(SandboxError, RuntimeError):
    """The pool is closed, or no sandbox became free within the acquire timeout."""


class SandboxFileError(SandboxError, OSError):
    """Writing or reading a file inside the sandbox failed (missing file, read-only path, too large)."""


class SandboxIsolationError(SandboxError, RuntimeError):
    """The sandbox cannot keep its code from acting as the host's user, and the caller needs it to."""


class SandboxLeftoverError(SandboxError, RuntimeError):
    """A process of the sandbox outlived the kills meant to end it: the sandbox is not reused (it is replaced)."""
