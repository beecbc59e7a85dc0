"""What the model reads after a turn: its cell's output and the verdict of its draft on the examples.

Messages are short (a 135M model has a 2k context): the output block only when the cell printed
something, then one line per failing example with what the call returned or raised.
"""

from __future__ import annotations

from envs.code_agent.verdicts import Verdicts
from envs.code_tasks import GeneratedTask

_ASSERTION = "AssertionError: "


def output_block(text: str) -> str:
    """The cell's output as a fenced block, or '' when it printed nothing."""
    return "" if text == "(no output)" else f"Output:\n```\n{text}\n```"


def example_lines(task: GeneratedTask, verdicts: Verdicts) -> list[str]:
    """One line per failing example: 'f(x) returned 1, expected 2' or 'f(x) raised KeyError: ...'."""
    if verdicts.setup_error is not None:
        return [f"Your code failed before any example ran: {verdicts.setup_error}"]
    lines = []
    for case, message in zip(task.visible, verdicts.messages):
        if message is None:
            continue
        if message.startswith(_ASSERTION) and " returned " in message:
            lines.append(message[len(_ASSERTION) :])  # the test's own "f(x) returned a, expected b"
        else:
            lines.append(f"{case.call} raised {message}")
    return lines


def draft_report(task: GeneratedTask, verdicts: Verdicts, output: str, *, more_turns: bool) -> str:
    """Feedback on a draft of the entry point that failed some visible example (or passed, in explicit mode)."""
    passed, total = sum(verdicts.passed), len(verdicts.passed)
    lines = [block for block in (output_block(output),) if block] + [f"Examples: {passed} of {total} passed."]
    lines += example_lines(task, verdicts)
    if more_turns and passed < total:
        lines.append(f"Fix `{task.entry_point}` and send the whole function again in a ```python block.")
    elif more_turns:
        lines.append("Every example passes. Call the submit tool to hand it in, or improve it first.")
    return "\n".join(lines)


def instructions(task: GeneratedTask, max_turns: int, submit: str) -> str:
    """The protocol, appended to the problem statement."""
    entry = task.entry_point
    if submit == "on_pass":
        done = "The first version that passes every example is graded by hidden tests (other inputs, edge cases)."
    else:
        done = "Call the submit tool to hand in your function; on your last reply the latest version is graded."
    return (
        f"Reply with a ```python block that defines `{entry}`. I run it and check it on the examples; if one fails "
        f"you see what it returned or raised, and you can send a fixed version. {done} You have {max_turns} replies."
    )
