"""What a vLLM server is checked for before training, and its dev-mode weight reload.

Logprob semantics: vLLM returns *raw* logprobs (``log_softmax(logits)``, temperature ignored) unless it
was launched with ``--logprobs-mode processed_logprobs``, which returns them after temperature (and after
top-k/top-p, which training keeps off): ``log_softmax(logits / T)``, what the loss needs. Launch flags
cannot be read over HTTP, so the check measures them: the same one-token request at two temperatures
returns the same top-1 logprob from a raw server and different ones from a processed one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from agentrl.engines.base import LogprobSemantics
from agentrl.engines.sglang_transport import HttpTransport, error_text
from agentrl.errors import EngineError

PROBE_PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
PROBE_TEMPERATURES = (1.0, 0.25)
SAME_TOL = 1e-5  # raw logprobs at two temperatures agree to float32 rounding


async def served_model(http: HttpTransport, url: str) -> str:
    """The first model /v1/models lists (vLLM's --served-model-name, or the model path)."""
    status, reply = await http.call("GET", url, "/v1/models")
    data = reply.get("data") if isinstance(reply, dict) else None
    if status != 200 or not data:
        raise EngineError(f"vLLM server {url}/v1/models listed no model (HTTP {status}): {error_text(reply)}")
    return str(data[0]["id"])


async def _top1_logprob(http: HttpTransport, url: str, model: str, temperature: float) -> float:
    body: dict[str, Any] = {
        "model": model,
        "prompt": PROBE_PROMPT,
        "max_tokens": 1,
        "temperature": temperature,
        "logprobs": 1,
        "seed": 0,
        "return_tokens_as_token_ids": True,
    }
    status, reply = await http.call("POST", url, "/v1/completions", body)
    if status != 200:
        raise EngineError(
            f"vLLM server {url}/v1/completions failed the logprob probe (HTTP {status}): {error_text(reply)}"
        )
    top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
    return max(float(v) for v in top.values())


async def check_logprob_semantics(http: HttpTransport, url: str, model: str) -> tuple[LogprobSemantics, str]:
    """Measure whether ``url`` returns tempered (processed) or raw logprobs; returns it and a line to print."""
    at_one, sharper = [await _top1_logprob(http, url, model, t) for t in PROBE_TEMPERATURES]
    if not (math.isfinite(at_one) and math.isfinite(sharper)):
        raise EngineError(f"vLLM server {url} returned non-finite probe logprobs ({at_one}, {sharper})")
    temps = f"top-1 logprob {at_one:.5f} at T=1, {sharper:.5f} at T={PROBE_TEMPERATURES[1]}"
    if abs(at_one - sharper) <= SAME_TOL:
        return LogprobSemantics.RAW, (
            f"returns RAW logprobs ({temps}): only temperature 1.0 gives the loss its logprobs; launch with "
            "--logprobs-mode processed_logprobs to sample at other temperatures"
        )
    return LogprobSemantics.TEMPERED_FULL_VOCAB, f"returns tempered logprobs (processed_logprobs: {temps})"


async def reload_weights(http: HttpTransport, url: str, path: Path, version: int, timeout_s: float) -> None:
    """Load the safetensors in ``path`` into the paused server and record ``version`` there."""
    raise NotImplementedError
