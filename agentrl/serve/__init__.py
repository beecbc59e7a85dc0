"""Serving the embedded engine over HTTP: SGLang's native API (``server``) and the OpenAI-compatible ``/v1``
routes (``openai_routes``), built from the reusable request and response parts of ``agentrl.openai_api``.
"""
