"""The agent gateway: train an agent program written against the OpenAI client, without rewriting it.

Each episode runs the user's agent (``async def agent(client, task)`` or a command with ``OPENAI_BASE_URL``)
against its own OpenAI-compatible endpoint, ``http://127.0.0.1:PORT/ep/<key>/v1``, served on a private
event-loop thread (``server``). Every ``/chat/completions`` call is one assistant turn of the episode
(``runner``): its messages are checked against the episode's history (``transcript``: new messages become
env tokens with mask 0; a rewritten history starts a recorded new token segment), the turn is sampled by
the engine and recorded by the token ledger exactly as on the env path (ids, logprobs, versions), and the
reply goes back with Hermes tool calls as ``tool_calls``. The agent's return value is the outcome. The
gateway is the env ``agentrl/AgentGateway-v0`` (``env``), so groups, partial rollouts, the buffer and
training work unchanged; ``docs/interop.md`` has the design decisions and an example.
"""
