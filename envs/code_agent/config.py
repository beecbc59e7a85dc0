"""Constructor arguments of CodeAgent-v0 (validated before any sandbox starts)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.code_exec.config import SandboxSetting
from envs.code_exec.grading.grader import budget_problem
from envs.code_tasks import GeneratorConfig
from sandboxes.config import AutoSandboxConfig


class CodeAgentConfig(BaseModel):
    """Task set and split, turn protocol, reward, limits and sandbox of the multi-turn coding agent env."""

    model_config = ConfigDict(extra="forbid")

    tasks: GeneratorConfig = Field(
        default_factory=GeneratorConfig,
        description="The procedural task generator: seed, per-family counts, held-out families (envs/code_tasks).",
    )
    split: Literal["train", "validation", "test_instances", "test_kinds", "test", "all"] = Field(
        "train",
        description="train; validation (untrained behaviours of the trained families, for choosing settings; "
        "tasks.validation_fifths > 0); test_instances (unseen behaviours of the trained families); test_kinds "
        "(families never trained on); test (both held-out splits); all.",
    )
    max_turns: int = Field(3, ge=1, description="Replies per episode; on the last one the latest draft is graded.")
    submit: Literal["on_pass", "explicit"] = Field(
        "on_pass",
        description="on_pass: the first draft that passes every visible example is submitted; explicit: only the "
        "submit tool call submits (or the last turn).",
    )
    outcome: Literal["all", "fraction"] = Field(
        "all",
        description="Episode outcome: 1 when every hidden test passes, else 0 ('all'); or the fraction passed, which "
        "also pays degenerate drafts (returning the input unchanged passes the cases where that is the answer).",
    )
    shaping: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Per-turn reward: shaping x (change in the fraction of visible examples the latest draft passes). "
        "Its episode sum depends on shaping_terminal.",
    )
    shaping_terminal: Literal["final_draft", "zero"] = Field(
        "zero",
        description="Potential of the terminal state. zero (default): Ng, Harada and Russell's policy-invariant "
        "form; the grading step also pays -shaping x the fraction, so the shaping of every graded episode sums to 0 "
        "and only moves credit between turns. final_draft: the graded draft's fraction, so the shaping sums to "
        "shaping x that fraction and pays a draft that hard-codes the visible examples (+shaping with outcome 0). "
        "On the main job both learned alike over 3 seeds in each precision (docs/results/main-job.md).",
    )
    stall_penalty: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Turn reward of a draft that fails and whose results on the visible examples (pass flags, returned "
        "values, errors) equal an earlier draft's of the episode, an identical resubmission included: the turn taught "
        "nothing. Not potential-based: it prefers episodes that use their turns to try something new.",
    )
    grading_sandbox_scope: Literal["draft", "episode"] = Field(
        "draft",
        description="draft: each distinct draft checked in a fresh sandbox that no other code enters, which also runs "
        "its hidden tests when it is submitted; episode: one fresh sandbox for all checks of an episode, removed when "
        "it ends (no other episode's code enters it). docs/sandbox-security.md, Round 3.",
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
        description="Outcome 0 (and no positive shaping) for an episode whose checks raised a hack flag (attempted "
        "exploit; see docs/sandbox-security.md); off by default: flags are always recorded and counted.",
    )
    expose_tools: bool = Field(
        False, description="List run_python/submit as tools in the chat template (fenced python blocks always work)."
    )
    cell_timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit of one code cell in the sandbox session.")
    test_timeout_s: float = Field(3.0, gt=0, description="Wall-clock limit of each example or hidden test.")
    grading_timeout_s: float | None = Field(
        6.0,
        gt=0,
        description="Wall-clock budget of one check's tests together (the visible examples, or the hidden tests); "
        "tests left when it is spent fail as timed out. A draft that loops cost every test test_timeout_s (30 s "
        "for 9 hidden tests) while the step boundary waited on it. None: per-test limits only.",
    )
    max_output_chars: int = Field(
        600,
        ge=100,
        description="Cell output shown to the model (head and tail kept): small models have short contexts.",
    )
    sandbox: SandboxSetting = Field(
        default_factory=AutoSandboxConfig,
        description="Sandbox settings: kind docker|process|auto plus the backend's own fields (as CodeExec-v0).",
    )

    @model_validator(mode="after")
    def _grading_budget_holds_a_test(self) -> CodeAgentConfig:
        problem = budget_problem(self.test_timeout_s, self.grading_timeout_s, "test_timeout_s", "grading_timeout_s")
        if problem is not None:
            raise ValueError(problem)
        return self
