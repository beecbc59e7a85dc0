"""agentrl.trainer.sft: scripted chats tokenized as a rollout records them, and a warm-up that lowers their loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.chat import ChatAssembler
from agentrl.errors import ConfigError
from agentrl.models.loading import load_model, load_tokenizer
from agentrl.trainer.sft import SftConfig, _batch_loss, _micro_batches, chat_tokens, run_sft

ROOT = Path(__file__).resolve().parents[1]
CHATS = [
    [
        {"role": "user", "content": f"Write add{i}(a, b)."},
        {"role": "assistant", "content": f"```python\ndef add{i}(a, b):\n    return a - b\n```"},
        {"role": "user", "content": f"add{i}(1, 2) returned -1, expected 3."},
        {"role": "assistant", "content": f"```python\ndef add{i}(a, b):\n    return a + b\n```"},
    ]
    for i in range(3)
]


def test_chat_tokens_are_the_rendered_chat_with_only_assistant_turns_trained(tiny_model_dir: Path) -> None:
    assembler = ChatAssembler(load_tokenizer(tiny_model_dir))
    row = chat_tokens(assembler, CHATS[0])
    text = assembler.decode(row.prompt_ids + row.completion_ids)
    rendered = assembler.render(CHATS[0], add_generation_prompt=False)
    # one tokenization, the template's; the row ends at the last end-of-turn token, as a sampled turn does
    assert rendered.startswith(text) and rendered[len(text) :].strip() == ""
    trained = [t for t, m in zip(row.completion_ids, row.loss_mask) if m]
    replies = "".join(m["content"] + "<|im_end|>" for m in CHATS[0] if m["role"] == "assistant")
    assert assembler.decode(trained) == replies  # the replies and their end-of-turn token, nothing else
    assert sorted(set(row.turn_ids) - {-1}) == [0, 1]
    with pytest.raises(ConfigError, match="at least one assistant message"):
        chat_tokens(assembler, CHATS[0][:1])
    with pytest.raises(ConfigError, match="two assistant messages in a row"):
        chat_tokens(assembler, [CHATS[0][0], CHATS[0][1], CHATS[0][1]])


def test_an_untrained_assistant_turn_is_context_only(tiny_model_dir: Path) -> None:
    assembler = ChatAssembler(load_tokenizer(tiny_model_dir))
    chat = [dict(m) for m in CHATS[0]]
    chat[1]["trained"] = False  # the wrong draft: seen, not imitated
    row, full = chat_tokens(assembler, chat), chat_tokens(assembler, CHATS[0])
    assert row.completion_ids == full.completion_ids  # the same tokens in context
    trained = [t for t, m in zip(row.completion_ids, row.loss_mask) if m]
    assert assembler.decode(trained) == CHATS[0][3]["content"] + "<|im_end|>"  # only the fix is trained
    assert sum(row.loss_mask) < sum(full.loss_mask)


def test_warmup_lowers_the_loss_of_the_scripted_chats(tiny_model_dir: Path) -> None:
    torch.manual_seed(0)
    tokenizer, lm = load_tokenizer(tiny_model_dir), load_model(tiny_model_dir)
    assembler = ChatAssembler(tokenizer)
    rows = [chat_tokens(assembler, chat) for chat in CHATS]
    from agentrl.trainer.logprobs import PolicyLogprobs

    def mean_nll() -> float:
        with torch.no_grad():
            nll, count = _batch_loss(PolicyLogprobs(lm), rows, tokenizer.pad_token_id or 0)
        return float(nll) / count

    before = mean_nll()
    report = run_sft(lm, assembler, CHATS, SftConfig(epochs=20, lr=1e-3, batch_tokens=256))
    after = mean_nll()
    assert report.chats == 3 and report.steps >= 20 and report.trained_tokens == sum(sum(r.loss_mask) for r in rows)
    assert after < 0.5 * before, (before, after)
    with pytest.raises(ConfigError, match="no chats"):
        run_sft(lm, assembler, [], SftConfig())


def test_micro_batches_accumulate_to_the_same_step_as_one_forward(tiny_model_dir: Path) -> None:
    """micro_batch_tokens bounds a forward's size, not the step: one chat per forward gives the whole-batch update."""
    tokenizer = load_tokenizer(tiny_model_dir)
    assembler = ChatAssembler(tokenizer)
    rows = [chat_tokens(assembler, chat) for chat in CHATS]
    assert [len(m) for m in _micro_batches(rows, 64)] == [1, 1, 1]  # every chat is longer than 32 tokens
    assert _micro_batches(rows, None) == [rows]
    base = {k: v.clone() for k, v in load_model(tiny_model_dir).state_dict().items()}
    trained, reports = [], []
    for micro_tokens in (None, 64):
        lm = load_model(tiny_model_dir)
        cfg = SftConfig(epochs=3, lr=1e-3, batch_tokens=4096, micro_batch_tokens=micro_tokens)
        reports.append(run_sft(lm, assembler, CHATS, cfg))
        trained.append(lm.state_dict())
    assert reports[0].steps == reports[1].steps == 3
    assert reports[1].loss_per_step == pytest.approx(reports[0].loss_per_step, rel=1e-5)
    update = sum(float(((trained[0][k] - base[k]) ** 2).sum()) for k in base) ** 0.5
    gap = sum(float(((trained[0][k] - trained[1][k]) ** 2).sum()) for k in base) ** 0.5
    assert update > 0 and gap <= 1e-3 * update, (gap, update)


@pytest.mark.slow
def test_code_agent_warmup_script_writes_a_loadable_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "warm"
    cmd = [sys.executable, str(ROOT / "scripts" / "warmup_code_agent.py"), "--model", str(tiny_model_dir)]
    cmd += ["--out", str(out), "--tasks", "6", "--epochs", "1", "--sandbox", "process", "--lr", "1e-4"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "warmup.json").read_text())
    assert report["tasks_tried"] == 6 and 0 < report["chats"] <= 6 and report["trained_tokens"] > 0
    assert len(report["loss_per_step"]) == report["steps"] >= 1
    load_model(out)  # a model directory a run config can point model.path at
    assert load_tokenizer(out).chat_template
    assert not (tmp_path / "warm.partial").exists()  # staged beside and renamed into place


def test_the_generic_warmup_script_trains_any_envs_chats(tiny_model_dir: Path, tmp_path: Path) -> None:
    """scripts/warmup_sft.py: a JSONL of chats (or episodes, filtered by reward) with an env's tool schemas."""
    chats = tmp_path / "chats.jsonl"
    chat = {
        "messages": [
            {"role": "user", "content": "Find the key."},
            {
                "role": "assistant",
                "content": '<tool_call>\n{"name": "go", "arguments": {"room": "hall"}}\n</tool_call>',
            },
            {"role": "tool", "name": "go", "content": "You are in the hall. A key lies here."},
            {"role": "assistant", "content": "I found the key."},
        ]
    }
    poor = {**chat, "final_reward": 0.0}
    chats.write_text("\n".join(json.dumps(c) for c in (chat | {"final_reward": 1.0}, poor)) + "\n")
    out = tmp_path / "warm"
    cmd = [sys.executable, str(ROOT / "scripts" / "warmup_sft.py"), "--model", str(tiny_model_dir), "--chats"]
    cmd += [str(chats), "--out", str(out), "--env", "agentrl/ToolUse-v0", "--min-reward", "0.5", "--epochs", "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[warmup] 1 chats from" in done.stdout and "3 tool schemas in the prompt" in done.stdout
    report = json.loads((out / "warmup.json").read_text())
    assert report["chats"] == 1 and report["trained_tokens"] > 0 and report["env"] == "agentrl/ToolUse-v0"
    load_model(out)
    chats.write_text('{"text": "no messages"}\n')
    bad = subprocess.run([*cmd[:5], str(chats), *cmd[6:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and f'{chats}:1: no "messages" list' in bad.stderr


def test_the_tool_jobs_warmup_runs_as_its_script_chains_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    """scripts/tool_agent.sh: the chats script's last line is the --env-kwargs of warmup_sft.py (same tool schemas)."""
    chats = tmp_path / "chats.jsonl"
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "tool_agent_chats.py"), "--chats", "4", "--out", str(chats)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    env_kwargs = made.stdout.strip().splitlines()[-1]
    assert json.loads(env_kwargs)["tools"] == ["lookup", "calculator"]
    out = tmp_path / "warm"
    cmd = [sys.executable, str(ROOT / "scripts" / "warmup_sft.py"), "--model", str(tiny_model_dir), "--chats"]
    cmd += [str(chats), "--out", str(out), "--env", "agentrl/ToolUse-v0", "--env-kwargs", env_kwargs, "--epochs", "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[warmup] 4 chats from" in done.stdout and "2 tool schemas in the prompt" in done.stdout
    assert (out / "warmup.json").is_file()

    # The script warms up again only when the chats (or the settings) changed.
    again = subprocess.run([*cmd, "--skip-if-current"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "not run again" in again.stdout, again.stderr[-3000:]
    chats.write_text(chats.read_text().splitlines(keepends=True)[0])
    changed = subprocess.run([*cmd, "--skip-if-current"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert changed.returncode == 0 and "[warmup] 1 chats from" in changed.stdout, changed.stderr[-3000:]
    assert json.loads((out / "warmup.json").read_text())["chats"] == 1


TOOL_ENV = '''
"""A tool env beside the user's chats (not on any import path but the working directory)."""
from agentrl.env import MultiTurnEnv, user


class Lookup(MultiTurnEnv):
    """Look a word up."""

    max_turns = 2

    def __init__(self) -> None:
        self.tools = (self.lookup,)

    def lookup(self, word: str) -> str:
        """Define a word.

        Args:
            word: The word.
        """
        return word

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [user("Define 'cat'.")], {"task_id": "t0"}

    def step(self, action):
        return [], 0.0, True, False, {}
'''


def test_the_warmup_finds_the_env_in_the_working_directory_and_shows_step_k_of_n(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "my_envs.py").write_text(TOOL_ENV, encoding="utf-8")
    chat = {"messages": [{"role": "user", "content": "Define 'cat'."}, {"role": "assistant", "content": "A pet."}]}
    (tmp_path / "chats.jsonl").write_text(json.dumps(chat) + "\n")
    script = ROOT / "scripts" / "warmup_sft.py"
    cmd = [sys.executable, str(script), "--model", str(tiny_model_dir), "--chats", "chats.jsonl", "--out", "warm"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [*cmd, "--env", "my_envs:Lookup", "--epochs", "2"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 tool schemas in the prompt" in done.stdout
    steps = [line for line in done.stdout.splitlines() if line.startswith("[warmup] step ")]
    assert [line.split(":")[0] for line in steps] == ["[warmup] step 1/2", "[warmup] step 2/2"]
    assert all(", ETA " in line for line in steps) and steps[-1].endswith("ETA 0:00)")
    wrong = subprocess.run([*cmd, "--env", "my_env:Lookup"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert (
        "warmup_sft.py: error: cannot import module 'my_env'" in wrong.stderr
        and "run it where my_env.py is" in wrong.stderr
    )
    shown = subprocess.run([sys.executable, str(script), "--help"], env=env, capture_output=True, text=True)
    text = " ".join(shown.stdout.split())
    assert "--epochs EPOCHS Passes over the chats. (default: 2)" in text
    assert "--lr LR AdamW learning rate (constant). (default: 2e-05)" in text
    assert "--batch-tokens BATCH_TOKENS Tokens per optimizer step" in text and "(default: 4096)" in text
