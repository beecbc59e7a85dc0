"""A command-line agent (a subprocess of the gateway): the calculator loop of gateway_agents on the sync client.

It reads the task as one JSON line on stdin (or as its last argument with --argv), talks to OPENAI_BASE_URL
with OPENAI_API_KEY as any OpenAI program does, logs to stdout and stderr, and prints its reward last.
With AGENTRL_TEST_PIDS set it writes its pid there (tests check it is gone after a kill); with
AGENTRL_TEST_MARKERS set it leaves a marker file per model call.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import openai
from gateway_agents import SYSTEM, TOOLS, run_tool

task = json.loads(sys.argv[-1] if "--argv" in sys.argv else sys.stdin.readline())
if os.environ.get("AGENTRL_TEST_PIDS"):
    (Path(os.environ["AGENTRL_TEST_PIDS"]) / str(os.getpid())).write_text(task["task_id"])
client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
messages: list = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
reward = 0.0
print(f"task {os.environ['AGENTRL_TASK_ID']} at {os.environ['OPENAI_BASE_URL']}", flush=True)
for _ in range(task.get("max_calls", 3)):
    reply = client.chat.completions.create(
        model="policy", messages=messages, tools=TOOLS, max_tokens=task.get("max_tokens", 40)
    )
    if os.environ.get("AGENTRL_TEST_MARKERS"):
        (Path(os.environ["AGENTRL_TEST_MARKERS"]) / uuid.uuid4().hex).touch()
    message = reply.choices[0].message
    print(f"model said {message.content!r}", file=sys.stderr, flush=True)
    messages.append(message.model_dump(exclude_none=True))
    if not message.tool_calls:
        reward = float((message.content or "").strip() == str(task["answer"]))
        break
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call)})
print(json.dumps({"reward": reward, "reward_components": {"correct": reward}}))
