"""The exception tree of agentrl.

Every error is an ``AgentRLError`` and also subclasses the matching stdlib type, so callers can
catch either. Messages say what failed, the offending value, and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AgentRLError(Exception):
    """Base class of every error raised by agentrl."""


class ConfigError(AgentRLError, ValueError):
    """A run configuration (YAML file or CLI override) is invalid."""


class EnvNotFoundError(AgentRLError, KeyError):
    """An environment id or ``module:Class`` reference cannot be resolved."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ModelLoadError(AgentRLError, FileNotFoundError):
    """A model directory is missing or does not hold a loadable model."""


class TemplateError(AgentRLError, ValueError):
    """A chat template cannot extend the token history as an exact prefix."""


class EnvContractError(AgentRLError, TypeError):
    """An environment's ``reset`` or ``step`` returned something outside the env contract (``agentrl.env``)."""


class EngineError(AgentRLError, RuntimeError):
    """An inference engine failed, is unreachable, or returned malformed data."""


class EngineConfigError(EngineError, ValueError):
    """An inference engine runs with settings that break training (e.g. logprob semantics)."""


class RolloutError(AgentRLError, RuntimeError):
    """A rollout step failed (and the config says failures are fatal)."""


class ReplayDivergenceError(RolloutError):
    """Restoring an environment reproduced a state that differs from the recorded one (the episode restarts)."""


class RolloutBufferError(AgentRLError, RuntimeError):
    """The durable rollout buffer is corrupted or belongs to another model/tokenizer."""


class CheckpointError(AgentRLError, RuntimeError):
    """A checkpoint is missing, corrupt, or belongs to another run/model."""


class PreflightError(AgentRLError, RuntimeError):
    """An environment's external resources (sandbox engine, image, service) are not usable."""


class ToolCallError(AgentRLError, ValueError):
    """A tool call could not be parsed or executed (reported to the model, not raised in rollouts)."""


class OpenAIRequestError(AgentRLError, ValueError):
    """An OpenAI-format request is malformed or asks for what agentrl does not serve (answered with HTTP 400)."""


class AgentGatewayError(AgentRLError, RuntimeError):
    """An agent program behind the gateway failed, timed out, or returned no usable reward."""


class GatewayRequestError(AgentGatewayError, OpenAIRequestError):
    """An agent's OpenAI request cannot be served as a training turn (answered with HTTP 400 and this text)."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choice, or ``""`` when none is close."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" Did you mean {matches[0]!r}?" if matches else ""
