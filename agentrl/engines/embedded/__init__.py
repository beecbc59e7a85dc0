"""The embedded engine: an in-process torch engine with continuous batching, a slot KV cache, a prefix
cache and a lean Llama/Qwen forward, servable over SGLang's HTTP API (``server``).

Only ``engine.EmbeddedEngine`` is public; the other modules are its internals.
"""
