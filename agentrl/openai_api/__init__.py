"""OpenAI-compatible serving, in reusable parts: request -> tokens (``render``), result -> response (``responses``).

``agentrl serve`` mounts them at /v1 (``embedded/openai_routes.py``); a per-episode agent gateway can reuse
the same rendering and response building around its own token ledger.
"""
