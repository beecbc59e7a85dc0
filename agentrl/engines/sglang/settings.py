"""What a server's ``/server_info`` tells about the settings training depends on, and what it cannot tell.

SGLang 0.5.x answers ``GET /server_info`` (``/get_server_info`` before 0.5.10) with its resolved server
arguments, one key per ``ServerArgs`` field, plus scheduler state and ``version``
(``srt/entrypoints/http_server.py``, ``server_info``; ``srt/utils/common.py``, ``build_server_info``).
The logprob semantics themselves are not a server argument: ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is an
environment variable of the server process (``srt/layers/sampler.py``), invisible over HTTP, so the
report says so instead of passing it silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.engines.sglang.wire import version_from_wire
from agentrl.errors import EngineConfigError

INVISIBLE_SETTINGS = (
    "SGLANG_RETURN_ORIGINAL_LOGPROB (an environment variable of the server process, not visible over HTTP): "
    "not checked; it would return logprobs before temperature. scripts/launch_sglang.sh refuses to start with "
    "it set; a server started otherwise must not set it"
)


@dataclass
class ServerSettings:
    """The settings of one server (an SGLang server or ``agentrl serve``) that training reads."""

    url: str
    version: str
    tp_size: int = 1
    skip_tokenizer_init: bool = False
    rl_on_policy_target: str | None = None
    deterministic: bool = False
    dtype: str | None = None  # the server's --dtype as it resolved it (None: the server does not say)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for ``--dry-run``."""
        parts = [f"{self.url}: {self.version}", f"tp_size {self.tp_size}", "logprobs log_softmax(logits / T)"]
        parts.append(f"dtype {self.dtype or 'not reported'}")
        if self.rl_on_policy_target:
            parts.append(f"rl_on_policy_target {self.rl_on_policy_target} (bf16 log_softmax, deterministic)")
        elif self.deterministic:
            parts.append("deterministic inference")
        if self.skip_tokenizer_init:
            parts.append("skip_tokenizer_init (no stop strings)")
        return ", ".join(parts + self.notes)


def read_settings(url: str, server_info: dict[str, Any]) -> ServerSettings:
    """Check one server's ``/server_info`` reply; EngineConfigError on settings that break training."""
    if not isinstance(server_info, dict) or "version" not in server_info:
        raise EngineConfigError(
            f"{url}/server_info returned no server information ({str(server_info)[:200]}); is this an SGLang server "
            "(>= 0.5.1) or agentrl serve?"
        )
    version_from_wire(server_info.get("weight_version"))  # an unusable version string fails here, naming the fix
    settings = ServerSettings(
        url=url,
        version=str(server_info["version"]),
        tp_size=int(server_info.get("tp_size") or 1),
        skip_tokenizer_init=bool(server_info.get("skip_tokenizer_init")),
        rl_on_policy_target=server_info.get("rl_on_policy_target") or None,
        deterministic=bool(server_info.get("enable_deterministic_inference")),
        dtype=str(server_info["dtype"]) if server_info.get("dtype") else None,
    )
    if _older_than(settings.version, (0, 5, 1)):
        raise EngineConfigError(
            f"{url} runs SGLang {settings.version}; agentrl needs >= 0.5.1 (weight_version in every reply), and "
            "0.5.10+ is tested: upgrade sglang on the server"
        )
    if int(server_info.get("dp_size") or 1) > 1:
        settings.notes.append(f"dp_size {server_info['dp_size']}")
    return settings


def check_request(settings: ServerSettings, stop: tuple[str, ...]) -> None:
    """Refuse a request the server would serve differently than asked."""
    if stop and settings.skip_tokenizer_init:
        raise EngineConfigError(
            f"{settings.url} runs with --skip-tokenizer-init, which ignores stop strings {list(stop)}; restart it "
            "without that flag (scripts/launch_sglang.sh does) or drop rollout.stop"
        )


def _older_than(version: str, minimum: tuple[int, ...]) -> bool:
    """True for an SGLang version string below ``minimum``; unknown formats (agentrl serve) are not older."""
    head = version.split("+")[0].split("-")[0]
    try:
        numbers = tuple(int(p) for p in head.split(".")[:3])
    except ValueError:
        return False
    return numbers < minimum
