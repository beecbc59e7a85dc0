"""Constructor arguments of CodeExec-v0 (validated before any sandbox starts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from envs.code_exec.grading.grader import budget_problem
from sandboxes.config import AutoSandboxConfig, SandboxConfig

SANDBOX_KINDS = ("docker", "process", "auto")


def kind_defaults_to_auto(value: Any) -> Any:
    """A coding env's sandbox defaults to ``kind: auto`` (a bare sandboxes config defaults to docker)."""
    if not isinstance(value, Mapping) or "backend" in value:  # the sandboxes' union names the rename
        return value
    settings = dict(value)
    kind = settings.setdefault("kind", "auto")
    if kind not in SANDBOX_KINDS:
        raise ValueError(f"sandbox kind {kind!r} is not one of {list(SANDBOX_KINDS)}")
    return settings


# The sandbox setting of a coding env: the sandboxes' typed union (tag ``kind``), auto unless told.
SandboxSetting = Annotated[SandboxConfig, BeforeValidator(kind_defaults_to_auto)]


class CodeExecConfig(BaseModel):
    """Task source and split, turn protocol, timeouts, rewards and sandbox of the coding env."""

    model_config = ConfigDict(extra="forbid")

    tasks: str = Field(
        "easy",
        description="Task source: a bundled set ('easy'), 'humaneval', or a path to a .jsonl file (schema in "
        "envs/code_exec/tasks.py).",
    )
    split: Literal["train", "test", "test_kinds", "test_instances", "all"] = Field(
        "train",
        description="train, or held-out tasks: test_kinds (unseen kinds), test_instances (unseen tasks of training "
        "kinds), test (both), all.",
    )
    heldout_kinds: list[str] | None = Field(
        None, description="Kinds held out of training (None: the source's default, easy -> conditionals, sets)."
    )
    heldout_per_kind: int = Field(2, ge=0, description="Last tasks of each training kind held out as test_instances.")
    max_turns: int = Field(
        3,
        ge=1,
        description="Assistant turns per episode; on the last turn any python block is graded as the submission.",
    )
    submit_on_definition: bool = Field(
        True,
        description="A python block that defines the entry-point function is the submission; False: only the submit "
        "tool (or the last turn) submits.",
    )
    expose_tools: bool = Field(
        False, description="List run_python/submit as tools in the chat template (fenced python blocks always work)."
    )
    cell_timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit of one code cell in the sandbox session.")
    test_timeout_s: float = Field(
        3.0, gt=0, description="Wall-clock limit of each hidden test (HumanEval's harness: 3 s for its whole check)."
    )
    grading_timeout_s: float | None = Field(
        6.0,
        gt=0,
        description="Wall-clock budget of one grading's tests together; tests left when it is spent fail as timed "
        "out. None: per-test limits only (a looping submission then costs every test test_timeout_s).",
    )
    max_output_chars: int = Field(
        1500, ge=100, description="Cell output shown to the model; longer output keeps its head and tail."
    )
    turn_cost: float = Field(0.0, ge=0.0, description="Subtracted from the reward of every turn that does not submit.")
    run_bonus: float = Field(
        0.0, ge=0.0, description="Reward for a code cell that runs without an error (a shaping signal)."
    )
    canary_share: float = Field(
        0.05,
        ge=0.0,
        lt=0.5,
        description="Share of the train split's task ids that are canaries: copies of real tasks whose hidden tests "
        "no answer can pass (envs/code_exec/canary.py), marked info['canary'], never trained on; their pass rate is "
        "integrity/canary_pass_rate. 0 turns them off; other splits have none.",
    )
    zero_reward_if_flagged: bool = Field(
        False,
        description="Reward 0 for an episode whose submission raised a hack flag (attempted exploit; see "
        "docs/sandbox-security.md); off by default: flags are always recorded and counted.",
    )
    sandbox: SandboxSetting = Field(
        default_factory=AutoSandboxConfig,
        description="Sandbox settings: kind docker|process|auto (auto: Docker when an engine and the image exist, else "
        "the process backend with a warning) plus the backend's own fields (sandboxes.config).",
    )

    @model_validator(mode="after")
    def _grading_budget_holds_a_test(self) -> CodeExecConfig:
        problem = budget_problem(self.test_timeout_s, self.grading_timeout_s, "test_timeout_s", "grading_timeout_s")
        if problem is not None:
            raise ValueError(problem)
        return self
