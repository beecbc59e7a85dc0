"""A command-line agent for the kill test: ``calls`` model calls, each followed by a user message and ``think_s``
seconds of tool time; deterministic given the replies, so a resumed job can replay it. It writes its pid to
AGENTRL_TEST_PIDS and a marker file per call to AGENTRL_TEST_MARKERS, and prints its reward (the share of replies
with an even length) last."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import openai

task = json.loads(sys.stdin.readline())
(Path(os.environ["AGENTRL_TEST_PIDS"]) / str(os.getpid())).write_text(task["task_id"])
client = openai.OpenAI(max_retries=0)
messages: list = [{"role": "user", "content": f"Task {task['task_id']}: count to {task['n']}."}]
even = 0
for k in range(task["calls"]):
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=task["max_tokens"])
    (Path(os.environ["AGENTRL_TEST_MARKERS"]) / uuid.uuid4().hex).touch()
    text = reply.choices[0].message.content or ""
    even += len(text) % 2 == 0
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"Next ({k})."}]
    time.sleep(task.get("think_s", 0.0))  # its tools' time
print(json.dumps({"reward": even / task["calls"]}))
