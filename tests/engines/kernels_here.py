"""One rule for tests that need SGLang's CPU kernels: skip naming why where they cannot run, fail under CI=true
on a CPU that has the instructions they need (there a missing or broken wheel is a setup defect, not a skip)."""

from __future__ import annotations

import os

import pytest
import torch

from agentrl.engines.embedded.cpu.sglang import REQUIRED_CPU_FLAGS, kernels_problem
from agentrl.util.cpu_flags import cpu_flags

KERNELS_PROBLEM = kernels_problem(torch.bfloat16, torch.device("cpu"))


def require_sglang_cpu_kernels() -> None:
    """Return where the kernels run; otherwise skip, or fail under CI=true on a CPU that fits them."""
    if KERNELS_PROBLEM is None:
        return
    if os.environ.get("CI") == "true" and all(flag in cpu_flags() for flag in REQUIRED_CPU_FLAGS):
        problem = KERNELS_PROBLEM
        pytest.fail(f"CI=true on a CPU with {REQUIRED_CPU_FLAGS} but SGLang's CPU kernels do not run: {problem}")
    pytest.skip(f"SGLang's CPU kernels do not run here: {KERNELS_PROBLEM}")


def require_native_kernels() -> None:
    """Return where agentrl's own CPU kernels run; otherwise skip, or fail under CI=true on a CPU that fits them
    (there a missing compiler or a failed build is a setup defect)."""
    from agentrl.engines.embedded.cpu.native import REQUIRED_CPU_FLAGS as NEEDED
    from agentrl.engines.embedded.cpu.native import native_problem

    problem = native_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true" and all(flag in cpu_flags() for flag in NEEDED):
        pytest.fail(f"CI=true on a CPU with {NEEDED} but agentrl's own CPU kernels do not run: {problem}")
    pytest.skip(f"agentrl's own CPU kernels do not run here: {problem}")
