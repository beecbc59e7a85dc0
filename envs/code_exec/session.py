"""What every sandboxed code env shares: its sandbox and grader started on first use, the preflight cell,
the verified replay of a session's cells on restore, and their release.

Grading never runs in the session's sandbox: the model's run cells could prepare it (write files the graded
draft reads, leave state in /tmp or /dev/shm). It runs in another sandbox of the same settings that only
graded code ever enters, one piece of code in each, removed after that code's checks (``grading_sandbox``): the
grading pool is single-use, so nothing a graded solution leaves behind (a process that escaped the kills, a
socket's state, a file) reaches another draft's grading, and a fresh sandbox started ahead of demand takes its
place.

Both come from the process's shared pools (``sandboxes.shared``), one per purpose: an env's session sandbox is
given back when the env closes, a grading sandbox after each grading, and the pool resets every sandbox given
back (every process killed, every writable place wiped), so the next owner starts warm and clean.

A mixin for ``MultiTurnEnv`` subclasses whose ``config`` has ``sandbox``, ``cell_timeout_s``,
``test_timeout_s``, ``grading_timeout_s`` and ``max_output_chars`` (``CodeExecConfig``, ``CodeAgentConfig``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from agentrl.errors import PreflightError, ReplayDivergenceError
from envs.code_exec.grading import Grader, GraderConfig, require_isolation
from envs.code_exec.grading.sources import solution_server_source
from envs.code_exec.sandboxing import shorten
from sandboxes import Sandbox, SandboxPool
from sandboxes.shared import shared_pool

log = logging.getLogger(__name__)


def _warm_for_grading(sandbox: Sandbox) -> None:
    """Start and stop the grading's solution service once, ahead of demand: a first grading in a fresh sandbox
    then costs what a later one does (it was about twice as slow)."""
    sandbox.open_service(solution_server_source()).close()


def grading_pool(settings: Any) -> SandboxPool:
    """The process's single-use grading pool for these sandbox settings (each sandbox warmed for grading)."""
    return shared_pool(settings, "grading", single_use=True, prepare=_warm_for_grading)


class SandboxSession:
    """The sandbox session of a code env; constructing the env starts nothing."""

    config: Any
    _sandbox: Sandbox | None = None
    _sandbox_pool: SandboxPool | None = None  # the pool _sandbox came from, which takes it back
    _grader: Grader | None = None

    @property
    def sandbox(self) -> Sandbox:
        """The env's session sandbox, taken from the shared pool on first use (given back on close)."""
        if self._sandbox is None:
            self._sandbox_pool = shared_pool(self.config.sandbox, "session")
            self._sandbox = self._sandbox_pool.acquire()
        return self._sandbox

    # The grading sandbox held for more checks: (what it is kept for: a draft's code, or None for the episode, and
    # the sandbox). Given back (to be removed) when another draft comes, the episode ends, or a check fails.
    _held_grading: tuple[str | None, Sandbox] | None = None

    @contextlib.contextmanager
    def grading_sandbox(self, code: str | None = None) -> Iterator[Sandbox]:
        """A grading sandbox no other code ever entered, removed (in the background) once it is given back.

        Without ``code``: a fresh one for this grading alone. With ``code`` and ``config.grading_sandbox_scope``
        ``draft`` (the default): the one that checked the same code earlier in this episode, else a fresh one (the
        previous draft's is given back): every check of one draft, its hidden tests included, in one sandbox that
        only this draft entered. With ``episode``: one fresh sandbox for every check of the episode. A check that
        raises gives its sandbox back, so a retry never reuses it."""
        pool = grading_pool(self.config.sandbox)
        if code is None:
            sandbox = pool.acquire()
            try:
                yield sandbox
            finally:
                pool.release(sandbox)
            return
        key = code if getattr(self.config, "grading_sandbox_scope", "draft") == "draft" else None
        if self._held_grading is not None and self._held_grading[0] != key:
            self.give_back_held_grading()
        if self._held_grading is None:
            self._held_grading = (key, pool.acquire())
        try:
            yield self._held_grading[1]
        except BaseException:
            self.give_back_held_grading()
            raise

    def give_back_held_grading(self) -> None:
        """Give back (to be removed) the grading sandbox held for later checks, if any."""
        if self._held_grading is not None:
            (_, sandbox), self._held_grading = self._held_grading, None
            grading_pool(self.config.sandbox).release(sandbox)

    @property
    def grader(self) -> Grader:
        """The env's grader (its judge process starts on the first check)."""
        if self._grader is None:
            self._grader = Grader(
                GraderConfig(
                    per_test_timeout_s=self.config.test_timeout_s, total_timeout_s=self.config.grading_timeout_s
                )
            )
        return self._grader

    def reset_session(self) -> None:
        """Clear the sandbox's Python session, if one was started (none yet means nothing to clear). A reset that
        fails in any way (what the last episode left defeated it) gives the sandbox up: the next use takes a
        fresh one, so nothing a solution did escapes as an error of the env. Ends the episode's grading sandbox."""
        self.give_back_held_grading()
        if self._sandbox is None:
            return
        try:
            self._sandbox.reset()
        except Exception as exc:  # noqa: BLE001 - never reuse it, never fail the episode for it
            log.warning("the session sandbox failed to reset (%s: %s): replacing it", type(exc).__name__, exc)
            sandbox, self._sandbox = self._sandbox, None
            if self._sandbox_pool is not None:
                self._sandbox_pool.discard(sandbox)

    def sandbox_preflight(self, what: str) -> list[str]:
        """Run one cell in this env's sandbox: proves the Docker engine, the image and the limits work."""
        result = self.sandbox.run_python("print(6 * 7)", timeout_s=self.config.cell_timeout_s)
        if result.stdout.strip() != "42":
            raise PreflightError(
                f"the sandbox answered {result.stdout!r} (stderr {result.stderr[-300:]!r}) to print(6 * 7); run "
                "`bash scripts/docker_setup.sh` to (re)start Docker and build the image, or set "
                "env.kwargs.sandbox.kind: process"
            )
        require_isolation(self.sandbox)  # fail at start-up, not at the first submission
        kind = type(self.sandbox).__name__
        return [f"sandbox {kind} ({what}): a cell ran in {result.duration_s * 1000:.1f} ms"]

    def replay_cells(self, task_id: str, cells: Sequence[str], recorded: Sequence[str]) -> None:
        """Re-run ``cells`` in a fresh session; raise ``ReplayDivergenceError`` when one shows other output than
        ``recorded`` or the session restarted on the way (the rollout then restarts the episode)."""
        self.reset_session()
        for index, (cell, expected) in enumerate(zip(cells, recorded, strict=True)):
            result = self.sandbox.run_python(cell, timeout_s=self.config.cell_timeout_s)
            replayed = shorten(result, self.config.max_output_chars)
            if result.restarted or replayed != expected:
                raise ReplayDivergenceError(
                    f"replaying task {task_id!r} diverged at cell {index + 1} of {len(cells)}: it showed "
                    f"{expected[:200]!r}, now {replayed[:200]!r} (a cell reading the time, randomness or outside "
                    "state is not reproducible); the episode restarts"
                )

    def close(self) -> None:
        """Give the session sandbox back to its pool and stop the grader's judge process (idempotent)."""
        self.give_back_held_grading()
        if self._grader is not None:
            self._grader.close()
            self._grader = None
        if self._sandbox is not None and self._sandbox_pool is not None:
            sandbox, self._sandbox = self._sandbox, None
            self._sandbox_pool.release(sandbox)
