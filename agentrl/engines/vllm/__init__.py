"""engine.kind vllm: the client for vLLM OpenAI-compatible servers in dev mode (``http.VLLMEngine``), its config,
wire format and start-up probe."""
