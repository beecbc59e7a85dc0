"""The base of every engine backend's config: the fields all backends share, and what each provides.

A backend is one subclass (``kind`` its tag, a ``Literal``) that owns its field checks and builds its
engine, its weight transport and its preflight, so no caller branches on ``engine.kind``.
``agentrl.engines.registry`` maps each kind to its subclass.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentrl.config.base import StrictModel
from agentrl.config.problems import Problem
from agentrl.engines.transport import StateDictTransport, WeightTransport
from agentrl.errors import EngineConfigError

if TYPE_CHECKING:  # the config stays importable without torch; building an engine imports what it needs
    import torch

    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine


class EngineConfig(StrictModel):
    """Settings every engine backend shares; subclass it (and register it) to add a backend."""

    kind: str = Field(description="The engine backend: a registered kind (embedded, sglang, or one you register).")
    import_modules: list[str] = Field(
        default_factory=list,
        description="Modules imported before `kind` is looked up, so the backends they register can be chosen "
        "(e.g. [my_engines]).",
    )
    max_seq_len: int = Field(4096, ge=16, description="Longest prompt + completion the engine accepts (tokens).")
    on_weight_update: Literal["finish_old", "abort"] = Field(
        "finish_old",
        description="Requests in flight at a weight update: finish under the old weights, or abort (partial output "
        "returned).",
    )

    @abstractmethod
    def build(self, model: ModelConfig) -> InferenceEngine:
        """The engine a run samples from, serving ``model``."""

    def weight_transport(self, run_dir: Path) -> WeightTransport:
        """How the trainer delivers new weights (default: the state dict, in process)."""
        return StateDictTransport()

    def colocated_transport(self, model: ModelConfig) -> WeightTransport | None:
        """A transport for a trainer in this process that never updates while the engine samples (a synchronous
        loop, one process), where the backend can do better than ``weight_transport``; None: it cannot."""
        return None

    def outlives_the_run(self) -> bool:
        """Whether the engine's weights outlive a run (a server an earlier run may have updated): then a fresh run
        pushes the trainer's weights to it as its start version before sampling. In-process engines load
        ``model.path`` themselves."""
        return False

    def samples_like_an_fp32_trainer(self, model: ModelConfig) -> bool:
        """Whether the engine's logprobs equal an fp32 trainer's up to float rounding (then a row sampled by the
        current weights needs no recompute under ``algorithm.proximal: recompute_stale``). The default trusts the
        choice of proximal: a server's dtype is set where it is launched (docs/algorithm.md: use ``recompute``
        with a bfloat16 server)."""
        return True

    async def served_dtype(self, model: ModelConfig) -> str | None:
        """The dtype the engine computes logprobs in, as far as it can be known before training (None: it cannot);
        by default what ``model.dtype`` resolves to here (an in-process engine loads the model so)."""
        from agentrl.models.loading import resolve_device, resolve_dtype

        return str(resolve_dtype(model.dtype, resolve_device(model.device))).removeprefix("torch.")

    def float32_twin_problem(self) -> str | None:
        """Why ``build_float32_twin`` cannot work for this backend (None: it can)."""
        return f"engine {self.kind} has no in-process float32 twin (it serves from its own process)"

    def build_float32_twin(self, model: ModelConfig, policy: torch.nn.Module) -> InferenceEngine:
        """An in-process engine with this one's settings that computes in float32 over the trainer's float32 model
        ``policy`` (``eval.precision: float32``). Only where ``float32_twin_problem`` is None."""
        raise EngineConfigError(
            f"eval.precision float32 needs a float32 twin of the engine, but {self.float32_twin_problem()}; set "
            "eval.precision: rollout"
        )

    async def preflight(self, model: ModelConfig) -> list[str]:
        """``agentrl train --dry-run``: check what the engine needs without loading the model; the lines to
        print (raise the backend's error, naming the fix, on a failure)."""
        return [f"engine {self.kind}: no checks before it starts"]

    def problems(self) -> list[Problem]:
        """Problems of this section that pydantic's field checks cannot express (keys such as ``engine.urls``);
        the run config reports them together with its cross-field problems."""
        return []


def import_engine_class(ref: str) -> Any:
    """The class named by ``"module:Class"``, imported when an engine is built: configs load without torch,
    and a backend's engine module may import its config module without an import cycle."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
