"""How the trainer delivers new weights to an engine; each backend's config names its transport.

``deliver`` runs on every rank (the state dict was gathered on each); only rank 0 holds the engine.
``StateDictTransport`` hands the tensors over (the in-process engine; SGLang servers that take
tensors through /update_weights_from_tensor); ``DiskTransport`` writes a Hugging Face model
directory (``weight_dirs``) that the engine loads by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentrl.engines.weight_dirs import publish_weights
from agentrl.errors import EngineError

if TYPE_CHECKING:
    from agentrl.engines.base import InferenceEngine


class WeightTransport(Protocol):
    """Delivers the trainer's weights to the engine as policy ``version``."""

    async def deliver(
        self, engine: InferenceEngine | None, lm: Any, state: Mapping[str, Any], version: int, *, is_main: bool
    ) -> None:
        """Called on every rank with the full state dict; ``engine`` is None where no engine lives."""
        ...


@dataclass(frozen=True)
class StateDictTransport:
    """The state dict itself, handed to ``engine.update_weights``."""

    async def deliver(
        self, engine: InferenceEngine | None, lm: Any, state: Mapping[str, Any], version: int, *, is_main: bool
    ) -> None:
        """Hand ``state`` to the engine (under torchrun only rank 0 holds one)."""
        if engine is not None:
            await engine.update_weights(state, version=version)


@dataclass(frozen=True)
class SharedStorageTransport:
    """No transfer: the engine samples from the trainer's own parameters (``share_weights``), in one process.

    Valid only while the trainer never updates during sampling (a synchronous loop); a weight sync then only
    sets the engine's version and flushes its prefix cache.
    """

    async def deliver(
        self, engine: InferenceEngine | None, lm: Any, state: Mapping[str, Any], version: int, *, is_main: bool
    ) -> None:
        """Share (first call) or confirm the shared storage, and set ``version``."""
        share = getattr(engine, "share_weights", None)
        if share is None:
            raise EngineError(
                f"{type(engine).__name__} cannot sample from the trainer's parameters (no share_weights); "
                "use the engine's weight_transport"
            )
        await share(lm, version=version)


@dataclass(frozen=True)
class DiskTransport:
    """A safetensors model directory under ``root`` (readable by the engine), loaded by path."""

    root: Path
    keep: int = 2

    async def deliver(
        self, engine: InferenceEngine | None, lm: Any, state: Mapping[str, Any], version: int, *, is_main: bool
    ) -> None:
        """Rank 0 writes ``root/v<version>`` with ``lm.save_pretrained`` and tells the engine to load it."""
        if not is_main:
            return
        if engine is None:
            raise EngineError("DiskTransport.deliver got no engine on the main rank; build the engine on rank 0")

        def write(directory: Path) -> None:
            lm.save_pretrained(directory, state_dict={k: v.cpu() for k, v in state.items()}, safe_serialization=True)

        directory = publish_weights(self.root, version, write, keep=self.keep)
        await engine.update_weights(str(directory), version=version)
