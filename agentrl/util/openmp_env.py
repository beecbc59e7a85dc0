"""OpenMP's wait policy for agentrl processes, chosen before torch loads libgomp (which reads it once, at load).

Sleeping at once (``OMP_WAIT_POLICY=PASSIVE``) makes every parallel region wake its team through the kernel: a
decode step here paid 6-14 µs per matmul for it (121 matmuls a step). Spinning long (libgomp's default, about 3 ms,
or ``ACTIVE``'s minutes) starves sandboxes and graders sharing the cores: a decode step was once 6x slower so. A short
spin, ``GOMP_SPINCOUNT=300`` (about 15 µs here), bridges the gaps inside a step and sleeps between them.

It must be ``ACTIVE`` with a spin count, not ``PASSIVE`` with one: once a process holds more OpenMP threads than
cores (the engine's scheduler thread has its own team beside the main thread's), libgomp spins its "throttled"
count, which is 0 under ``PASSIVE`` whatever ``GOMP_SPINCOUNT`` says, and ``min(1000, GOMP_SPINCOUNT)`` under
``ACTIVE`` (libgomp's ``env.c``, ``initialize_env``).
"""

from __future__ import annotations

from collections.abc import Mapping

SHORT_SPIN = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300"}
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def short_spin_unless_chosen(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``environ`` (before torch is imported): the short spin, or nothing where the user
    chose a wait policy or a spin count. ``os.environ.update(short_spin_unless_chosen(os.environ))``."""
    return {} if any(name in environ for name in WAIT_VARIABLES) else dict(SHORT_SPIN)


def wait_policy(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The wait-policy variables as ``environ`` holds them (None: unset, libgomp's default)."""
    return {name: environ.get(name) for name in WAIT_VARIABLES}


def team_sleeps_at_once(environ: Mapping[str, str]) -> bool:
    """Whether OpenMP threads sleep as soon as a parallel region ends (``PASSIVE``, or a spin count of 0): then a
    small op is cheaper on its calling thread alone than waking the team (``omp_team.py``); while the team spins,
    running an op alone only lets it fall asleep (decode steps 1.04-1.13x slower so, measured)."""
    return environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE" or environ.get("GOMP_SPINCOUNT") == "0"


def shell_exports(environ: Mapping[str, str]) -> str:
    """``export`` lines for the shell scripts (scripts/test.sh): the same choice as the command's."""
    return "\n".join(f"export {name}={value}" for name, value in short_spin_unless_chosen(environ).items())


if __name__ == "__main__":  # eval "$(.venv/bin/python -m agentrl.util.openmp_env)"
    import os

    print(shell_exports(os.environ))
