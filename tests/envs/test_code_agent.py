"""CodeAgent-v0 end to end in a real sandbox (process and Docker): draft, feedback, fix, submit; restore; farming."""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentrl.env import restore_env
from agentrl.rollout.replay import restore_episode_env
from agentrl.tools.toolcall import format_tool_call
from agentrl.trajectory import Episode, TurnRecord
from envs.code_agent import CodeAgentEnv
from envs.code_tasks import GeneratedTask, generate_tasks


def block(code: str) -> str:
    return f"Let me write it.\n```python\n{code}\n```"


def task_of(kind: str) -> GeneratedTask:
    return next(t for t in generate_tasks(split="all") if t.kind == kind)


def revealing_wrong(task: GeneratedTask) -> str:
    """A wrong variant whose failure on a visible example the feedback shows (the generator guarantees most)."""
    from tests.envs.test_code_task_generator import passes

    return next(w for w in task.wrong if not all(passes(w, task, task.visible_tests())))


@pytest.fixture
def env(sandbox_kind: str) -> Iterator[CodeAgentEnv]:
    # the reward values asserted below are final_draft's; the default form (zero) has a test of its own
    environment = CodeAgentEnv(split="all", max_turns=5, shaping_terminal="final_draft", sandbox={"kind": sandbox_kind})
    yield environment
    environment.close()


def test_draft_fails_an_example_then_a_traceback_then_the_fix_is_graded(env: CodeAgentEnv) -> None:
    task = task_of("strip_affix")
    observation, info = env.reset(seed=0, options={"task_id": task.task_id})
    assert observation[0]["content"].startswith(task.prompt) and info["entry_point"] == task.entry_point
    wrong = revealing_wrong(task)
    messages, reward, terminated, truncated, info = env.step(block(wrong))
    text = messages[0]["content"]
    assert not terminated and not truncated and info["action"] == "run" and info["run_failed"]
    assert f"Examples: {info['examples_passed']} of 3 passed." in text and " returned " in text and "expected" in text
    first_fraction = info["examples_passed"] / 3
    assert reward == pytest.approx(0.2 * first_fraction) and "final_reward" not in info
    messages, reward, _, _, info = env.step(block(wrong))  # the same draft again: named, not re-run
    assert messages[0]["content"].startswith("This is the same code as your previous version")
    assert info["repeated"] and info["run_failed"] and reward == 0.0
    messages, reward, terminated, _, info = env.step(block("print(undefined_name)"))
    assert "NameError: name 'undefined_name' is not defined" in messages[0]["content"]
    assert (reward, terminated, info["run_failed"], info["code_ran"]) == (0.0, False, True, False)
    _, reward, terminated, _, info = env.step(block(task.solution))
    assert terminated and info["success"] and info["final_reward"] == info["outcome"] == 1.0
    assert reward == pytest.approx(0.2 * (1 - first_fraction))
    assert env.shaping_total == pytest.approx(0.2)  # potential-based: shaping x final fraction, whatever the path
    assert info["reward_components"] == {"outcome": 1.0, "shaping": pytest.approx(0.2), "success": 1.0}


def test_exceptions_in_examples_are_reported_with_the_call(env: CodeAgentEnv) -> None:
    task = task_of("filter_agg")
    env.reset(seed=0, options={"task_id": task.task_id})
    messages, _, _, _, info = env.step(block(f"def {task.entry_point}(xs):\n    return xs[10]"))
    text = messages[0]["content"]
    assert f"{task.visible[0].call} raised IndexError: list index out of range" in text
    assert info["examples_passed"] == 0
    messages, _, _, _, _ = env.step(block(f"def {task.entry_point}(xs)\n    return 1"))
    assert "Your code failed before any example ran: SyntaxError" in messages[0]["content"]


def test_last_turn_grades_the_latest_draft_and_no_draft_scores_zero(sandbox_kind: str) -> None:
    task = task_of("kth_value")
    env = CodeAgentEnv(split="all", max_turns=2, shaping_terminal="final_draft", sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        env.step(block(revealing_wrong(task)))
        _, reward, terminated, truncated, info = env.step("I think that is right.")
        assert terminated and not truncated and info["action"] == "submit" and not info["success"]
        assert reward == 0.0 and info["final_reward"] == 0.0 and info["tests_passed"] < info["tests_total"]
        env.reset(seed=0, options={"task_id": task.task_id})
        env.step(block("print('exploring')"))
        _, reward, terminated, _, info = env.step(block("print('still exploring')"))
        assert terminated and info["final_reward"] == 0.0 and info["tests_passed"] == 0 and reward == 0.0
    finally:
        env.close()


def test_farming_shaping_never_beats_solving(sandbox_kind: str) -> None:
    """Trivial runs earn nothing; under final_draft, hard-coding the visible examples earns the shaping cap and
    outcome 0 (the default, zero, pays it nothing: the test below)."""
    task = task_of("word_counts")
    env = CodeAgentEnv(split="all", max_turns=3, shaping_terminal="final_draft", sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        trivial = [env.step(block("print(1)"))[1] for _ in range(2)]
        *_, info = env.step(block("print(1)"))
        assert sum(trivial) == 0.0 and info["final_reward"] == 0.0
        lookup = {case.call: case.expected for case in task.visible}
        table = ", ".join(f"{call.split('(', 1)[1][:-1]}: {expected}" for call, expected in lookup.items())
        cheat = f"def {task.entry_point}(text):\n    return {{{table}}}.get(text)"
        env.reset(seed=0, options={"task_id": task.task_id})
        _, reward, terminated, _, info = env.step(block(cheat))
        assert terminated and info["action"] == "submit" and not info["success"]  # passes the examples only
        assert reward + info["final_reward"] == pytest.approx(0.2)  # a solve earns 1 + 0.2
    finally:
        env.close()


def test_zero_terminal_potential_pays_nothing_for_hard_coding_the_examples(sandbox_kind: str) -> None:
    """Issue 30.7: today's shaping (final_draft) sums to shaping x p_final, so a table of the visible examples earns
    +0.2 with outcome 0; with shaping_terminal zero (Ng et al.) every graded episode's shaping sums to 0."""
    task = task_of("word_counts")
    lookup = {case.call: case.expected for case in task.visible}
    table = ", ".join(f"{call.split('(', 1)[1][:-1]}: {expected}" for call, expected in lookup.items())
    cheat = f"def {task.entry_point}(text):\n    return {{{table}}}.get(text)"
    wrong = revealing_wrong(task)
    totals: dict[str, list[float]] = {}
    for form in ("final_draft", "zero"):
        env = CodeAgentEnv(
            split="all", max_turns=3, submit="explicit", shaping_terminal=form, sandbox={"kind": sandbox_kind}
        )
        try:
            episodes = []
            for drafts in ([cheat, "Done.", "Done."], [wrong, task.solution, "Done."]):  # turn 3 grades the draft
                env.reset(seed=0, options={"task_id": task.task_id})
                rewards, info = [], {}
                for action in drafts:
                    _, reward, terminated, _, info = env.step(block(action) if action.startswith("def") else action)
                    rewards.append(reward)
                assert terminated and info["reward_components"]["shaping"] == pytest.approx(sum(rewards))
                episodes.append(sum(rewards) + info["final_reward"])  # the episode's return: shaping + outcome
            totals[form] = episodes
        finally:
            env.close()
    cheat_return, solve_return = totals["final_draft"]
    assert cheat_return == pytest.approx(0.2) and solve_return == pytest.approx(1.2)  # hard-coding pays 0.2
    assert totals["zero"] == [pytest.approx(0.0), pytest.approx(1.0)]  # the outcome alone: the shaping sums to 0


def test_explicit_submit_tool_and_fraction_outcome(sandbox_kind: str) -> None:
    task = task_of("dedupe")
    env = CodeAgentEnv(
        split="all", submit="explicit", outcome="fraction", expose_tools=True, sandbox={"kind": sandbox_kind}
    )
    try:
        assert [s["function"]["name"] for s in env.tool_schemas()] == ["run_python", "submit"]
        env.reset(seed=0, options={"task_id": task.task_id})
        messages, _, terminated, _, info = env.step(format_tool_call("run_python", {"code": task.solution}))
        assert not terminated and messages[0]["role"] == "tool" and "Every example passes" in messages[0]["content"]
        assert not info["run_failed"]
        _, _, terminated, _, info = env.step(format_tool_call("submit", {"code": revealing_wrong(task)}))
        assert terminated and 0.0 <= info["final_reward"] < 1.0
        assert info["final_reward"] == pytest.approx(info["tests_passed"] / info["tests_total"])
    finally:
        env.close()


def test_snapshot_and_replay_restore_the_session_and_divergence_restarts(env: CodeAgentEnv, sandbox_kind: str) -> None:
    task = task_of("digit_stat")
    actions = [block("import math\nsecret = math.factorial(7)\nprint(secret)"), block(revealing_wrong(task))]
    env.reset(seed=3, options={"task_id": task.task_id})
    for action in actions:
        env.step(action)
    snapshot, probe = env.snapshot(), block("print(secret + 1)")
    expected = env.step(probe)
    for mode in ("replay", "snapshot"):
        twin = CodeAgentEnv(split="all", max_turns=4, sandbox={"kind": sandbox_kind})
        try:
            kwargs = {"actions": actions} if mode == "replay" else {"snapshot": snapshot}
            restore_env(twin, seed=3, options={"task_id": task.task_id}, **kwargs)
            assert (twin.turn, twin.draft, twin.potential) == (2, env.snapshot()["draft"], snapshot["potential"])
            replayed = twin.step(probe)
            assert replayed[:2] == expected[:2] and replayed[0][0]["content"] == "Output:\n```\n5041\n```"
        finally:
            twin.close()
    noisy = CodeAgentEnv(split="all", sandbox={"kind": sandbox_kind})
    try:
        noisy.reset(seed=0, options={"task_id": task.task_id})
        noisy.step(block("import os\nprint(os.urandom(8).hex())"))
        episode = Episode(
            episode_id="e",
            task_id=task.task_id,
            group_id="g",
            seed=0,
            reset_options={"task_id": task.task_id},
            turns=[TurnRecord(index=0, reward=0.0)],
            env_snapshot=noisy.snapshot(),
        )
        outcome = restore_episode_env(noisy, episode)
        assert outcome.method == "restart" and "diverged at cell" in outcome.reason
    finally:
        noisy.close()


def test_made_by_gymnasium_passes_check_env_and_splits_hold_out_families() -> None:
    env = gym.make("agentrl/CodeAgent-v0", split="test_kinds", sandbox={"kind": "process"})
    try:
        base = env.unwrapped
        check_env(base, skip_render_check=True)
        kinds = {tid.split("/")[1] for tid in base.task_ids()}
        assert kinds == {"predicates", "rotate", "windows", "fizzbuzz", "parse_numbers"}
        observation, _ = env.reset(seed=0, options={"task_id": base.task_ids()[0]})
        assert "You have 3 replies" in observation[0]["content"]
        with pytest.raises(ValueError, match="Did you mean"):
            env.reset(seed=0, options={"task_id": base.task_ids()[0][:-1] + "x"})
    finally:
        env.close()


def test_fail_then_fix_trace_is_the_envs_own_chat(sandbox_kind: str) -> None:
    from envs.code_agent.traces import code_reply, fail_then_fix

    task = task_of("slices")
    env = CodeAgentEnv(split="all", sandbox={"kind": sandbox_kind})
    try:
        trace = fail_then_fix(env, task.task_id)
        assert trace is not None and [m["role"] for m in trace] == ["user", "assistant", "user", "assistant"]
        assert trace[0]["content"].startswith(task.prompt) and trace[3]["content"] == code_reply(task.solution)
        assert "Examples:" in trace[2]["content"] and (
            "returned" in trace[2]["content"] or "raised" in trace[2]["content"]
        )
    finally:
        env.close()


def test_fail_repeat_fix_trace_keeps_the_drafts_as_untrained_context(sandbox_kind: str) -> None:
    from envs.code_agent.traces import code_reply, fail_then_fix

    task = task_of("slices")
    env = CodeAgentEnv(split="all", sandbox={"kind": sandbox_kind})
    try:
        trace = fail_then_fix(env, task.task_id, train_draft=False, repeat=True)
        assert trace is not None
        assert [m["role"] for m in trace] == ["user", "assistant", "user", "assistant", "user", "assistant"]
        assert trace[1]["content"] == trace[3]["content"] != trace[5]["content"] == code_reply(task.solution)
        assert trace[4]["content"].startswith("This is the same code as your previous version")
        assert [m.get("trained", True) for m in trace if m["role"] == "assistant"] == [False, False, True]
    finally:
        env.close()


def test_a_failing_draft_with_results_already_seen_costs_the_stall_penalty(sandbox_kind: str) -> None:
    """Resubmitting, renaming, or going back to an earlier failing draft repeats feedback: each costs the penalty."""
    task = task_of("predicates")
    wrong, other = task.wrong[0], f"def {task.entry_point}(x):\n    return None"
    env = CodeAgentEnv(
        split="all", max_turns=6, stall_penalty=0.1, shaping_terminal="final_draft", sandbox={"kind": sandbox_kind}
    )
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        first = env.step(block(wrong))[1]
        _, repeat, _, _, info = env.step(block(wrong))
        assert info["repeated"] and info["stalled"] and repeat == pytest.approx(-0.1)
        _, cosmetic, *_ = env.step(block(f"# the same, commented\n{wrong}"))
        assert cosmetic == pytest.approx(-0.1)  # different code, the same results on every example
        _, new, *_ = env.step(block(other))
        assert new == pytest.approx(-first)  # new results: plain shaping (returning None passes no example)
        _, back, *_ = env.step(block(wrong))
        assert back == pytest.approx(first - 0.1)  # back to the first draft's results
        _, last, terminated, _, info = env.step("Submitting it.")  # the failing draft again, on the last turn
        assert terminated and not info["success"] and last == pytest.approx(-0.1)
        assert env.shaping_total == pytest.approx(first - 0.4)
        env.reset(seed=0, options={"task_id": task.task_id})
        env.step(block(wrong))
        assert env.step(block(task.solution))[2]  # a fix is never a stall
        assert env.shaping_total == pytest.approx(0.2)
    finally:
        env.close()
