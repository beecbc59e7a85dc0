"""An agent program as it exists outside agentrl: the official openai client (its own venv), a task on stdin.

It asks the model the task's question with ``openai.AsyncOpenAI`` (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
from its environment, as any OpenAI-client program), grades the reply itself and prints its reward as
the last line of stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys

import openai


async def main() -> None:
    task = json.loads(sys.stdin.readline())
    client = openai.AsyncOpenAI(timeout=3600)
    reply = await client.chat.completions.create(
        model="agentrl-policy",
        messages=[
            {"role": "system", "content": "Answer with the word only."},
            {"role": "user", "content": task["question"]},
        ],
        max_tokens=16,
    )
    text = (reply.choices[0].message.content or "").strip().lower()
    print(json.dumps({"reward": float(text == task["answer"]), "success": text == task["answer"]}))


if __name__ == "__main__":
    asyncio.run(main())
