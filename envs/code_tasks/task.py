"""A generated coding task as data: contract, reference, visible examples and hidden tests (JSON-able).

Cases are stored as Python source (``call`` and the ``expected`` value's repr), so a task file is
plain text; the test snippets and the prompt are rendered from them (``envs.code_tasks.render``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from envs.code_exec.tasks import CodingTask
from envs.code_tasks import render


class Case(BaseModel):
    """One call of the entry point and the value it must return, both as Python source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call: str = Field(description="The call, e.g. \"count_vowels('Apple')\".")
    expected: str = Field(description="repr() of the value the call must return, e.g. '2'.")


class GeneratedTask(BaseModel):
    """A procedurally generated function-writing task of one family, with visible and hidden cases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(description="'gen-s<seed>/<family>/<draw index>', unique within a generator seed.")
    kind: str = Field(description="The family; test_kinds holds out whole families.")
    domain: str = Field(description="strings, lists, numbers, dicts or parsing.")
    entry_point: str = Field(description="Name of the function to write.")
    signature: str = Field(description="The def line shown to the model.")
    doc: str = Field(description="What the function must do (the docstring).")
    solution: str = Field(description="Reference solution (passes every case).")
    wrong: list[str] = Field(description="Plausible wrong solutions that fail at least one hidden case.")
    visible: list[Case] = Field(min_length=1, description="Examples shown to the model and run on each draft.")
    hidden: list[Case] = Field(min_length=1, description="Tests of the reward; inputs differ from the visible ones.")

    @property
    def prompt(self) -> str:
        """The problem statement: signature, instruction and the visible examples."""
        return render.statement(self.signature, self.doc, [(c.call, c.expected) for c in self.visible])

    def visible_tests(self) -> list[str]:
        """Test snippets of the visible examples (their failure messages show the returned value)."""
        return [render.test_snippet(c.call, c.expected) for c in self.visible]

    def hidden_tests(self) -> list[str]:
        """Test snippets of the hidden cases (the reward)."""
        return [render.test_snippet(c.call, c.expected) for c in self.hidden]

    def coding_task(self, tests: list[str] | None = None) -> CodingTask:
        """This task in CodeExec's schema (hidden tests unless ``tests`` is given), for grading and JSONL."""
        return CodingTask(
            task_id=self.task_id,
            kind=self.kind,
            prompt=self.prompt,
            entry_point=self.entry_point,
            tests=self.hidden_tests() if tests is None else tests,
            solution=self.solution,
        )
