"""engine.kind sglang: the client for SGLang servers and sglang-routers (``http.SGLangEngine``), its config,
wire format, server topology, settings check and weight-update session."""
