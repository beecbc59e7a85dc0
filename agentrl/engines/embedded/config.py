"""``engine.kind: embedded``: the in-process torch engine's settings, and how it builds and checks itself."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentrl.engines.config import EngineConfig, import_engine_class
from agentrl.engines.transport import SharedStorageTransport, WeightTransport
from agentrl.errors import EngineConfigError

if TYPE_CHECKING:
    import torch

    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine

_GIB = 1024**3
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# where the lean forward's CPU operations come from (``agentrl/engines/embedded/cpu/select.py``)
CpuKernelsSetting = Literal["auto", "torch", "sglang"]
NativeKernelsSetting = Literal["auto", "on", "off"]


class EmbeddedEngineConfig(EngineConfig):
    """The embedded engine: continuous batching, a prefix cache and a lean forward, in this process."""

    kind: Literal["embedded"] = Field("embedded", description="In-process torch engine (the default).")
    max_batch_size: int = Field(64, ge=1, description="Most sequences decoded together in one forward pass.")
    seed: int = Field(0, description="Seed of the engine's sampler (default: the run's seed).")
    prefix_cache_tokens: int = Field(
        16384,
        ge=0,
        description="Most tokens of finished (or aborted) requests whose keys/values are kept, so a prompt extending "
        "one (the next turn, a resumed partial rollout) prefills only its new tokens; 0 disables. Memory: tokens x "
        "layers x 2 x kv_heads x head_dim x dtype bytes. Flushed at every weight update.",
    )
    share_prefixes: bool = Field(
        True,
        description="A request whose prompt shares a head with a running one (a group's G copies of a prompt, a long "
        "common system prompt) copies that head's keys/values instead of recomputing them; joining one step later "
        "when the head is being computed in the same step.",
    )
    max_prefill_tokens: int = Field(
        8192,
        ge=16,
        description="Most (padded) prompt tokens prefilled in one forward pass when requests join the batch.",
    )
    weight_left_rows: int | None = Field(
        None,
        ge=0,
        description="Forward steps of at most this many token rows compute each projection as weight @ x^T instead "
        "of x @ weight^T: the same product, which MKL streams about twice as fast at a few float32 rows on the "
        "CPUs measured. None: 8 for float32 on CPU, else 0 (off). `bench/bench_roofline.py` times both "
        "forms on the machine at hand.",
    )
    own_matmul_rows: int | None = Field(
        None,
        ge=0,
        description="float32 steps of at most this many token rows multiply through agentrl's float32 matmul "
        "(AVX2/FMA, batch invariant; before weight_left_rows). None: 128 on x86-64 where the portable decode loop "
        "builds, else 0 (off); a number above 0 needs that loop (engine.native_kernels). `bench/bench_roofline.py` "
        "times it against torch's matmul.",
    )
    pack_weights: bool | None = Field(
        None,
        description="bf16 on CPU: every projection reads a copy of its weight in oneDNN's packed layout, made once per "
        "weight version (F.linear re-lays the weight out on every call): the same numbers, bit for bit, 1.2-2.2x "
        "faster per matmul on the CPU measured, for one more copy of the weights in memory. None: on where a probe "
        "shows it works (bf16 on CPU with oneDNN); true: required (an error names why it cannot); false: off.",
    )
    cpu_kernels: CpuKernelsSetting = Field(
        "auto",
        description="bf16 on CPU: run the lean forward on SGLang's own CPU kernels (the sglang-kernel-cpu wheel: a "
        "VNNI-packed matmul, fused residual-add + RMSNorm, SiLU-and-mul, decode attention over the slot cache). "
        "auto: where the wheel is installed, the CPU has AVX512-BF16 and a probe matches torch; sglang: required "
        "(an error names why it cannot run); torch: never (then pack_weights applies).",
    )
    native_kernels: NativeKernelsSetting = Field(
        "auto",
        description="Where the lean forward runs on SGLang's CPU kernels: agentrl's own CPU kernels too "
        "(agentrl/engines/embedded/cpu/csrc, built with the C++ compiler by scripts/setup.sh or on first use): a "
        "matmul whose weight stream overlaps its arithmetic, a decode attention, and decode steps' layer loop in "
        "C++ (the Python loop's logits, bit for bit); decode steps 1.3-1.7x faster than on SGLang's alone on the "
        "CPU measured. auto: where they build and a probe matches torch; on: required (an error names why they "
        "cannot run); off: SGLang's matmul and attention and the Python loop.",
    )

    share_trainer_weights: bool = Field(
        True,
        description="When the trainer runs in this process and never updates while the engine samples "
        "(trainer.mode sync, no torchrun) and the engine's dtype is the trainer's float32: sample from the "
        "trainer's own parameters, so the model is held once (not twice) and a weight sync copies nothing. "
        "Otherwise, or when false, the weights are copied at every sync.",
    )

    def build(self, model: ModelConfig) -> InferenceEngine:
        """Load ``model.path`` in process on the configured device and dtype."""
        from agentrl.models.loading import resolve_device, resolve_dtype

        device = resolve_device(model.device)
        engine_cls = import_engine_class("agentrl.engines.embedded.engine:EmbeddedEngine")
        return engine_cls.from_pretrained(
            model.path, config=self, device=device, dtype=resolve_dtype(model.dtype, device)
        )

    def float32_twin_problem(self) -> str | None:
        """None: an embedded engine can always be built again in float32."""
        return None

    def build_float32_twin(self, model: ModelConfig, policy: torch.nn.Module) -> InferenceEngine:
        """An engine with these settings over ``policy``'s own float32 weights: ``model.path`` loaded as the rollout
        engine loads it (no training state such as activation checkpointing's hooks comes along), its parameters
        then replaced by views of the trainer's (its lean forward fuses q/k/v and gate/up into buffers of its own).
        The matmul forms take their float32 defaults, and the prefix cache holds this engine's bytes (the twin runs
        while this engine's caches are freed). ``policy`` must not change while the twin runs."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agentrl.models.loading import resolve_device, resolve_dtype

        odd = sorted({str(p.dtype) for p in policy.parameters()} - {"torch.float32"})
        if odd:
            raise EngineConfigError(
                f"eval.precision float32 evaluates the trainer's float32 master weights, but the policy holds {odd} "
                "parameters; load the trainer's model in float32"
            )
        device = resolve_device(model.device)
        twin = self.model_copy(
            update={
                "weight_left_rows": None,
                "own_matmul_rows": None,
                "pack_weights": None,
                "cpu_kernels": "auto",
                "prefix_cache_tokens": self.prefix_cache_tokens * resolve_dtype(model.dtype, device).itemsize // 4,
            }
        )
        twin_model = AutoModelForCausalLM.from_pretrained(model.path, dtype=torch.float32).to(device)
        try:
            twin_model.load_state_dict(policy.state_dict(), strict=True, assign=True)
        except RuntimeError as exc:
            raise EngineConfigError(
                f"the trainer's model does not match {model.path!r} parameter for parameter ({exc}); eval.precision "
                "float32 needs the trainer to hold model.path's architecture unwrapped"
            ) from exc
        twin_model.requires_grad_(False)
        engine_cls = import_engine_class("agentrl.engines.embedded.engine:EmbeddedEngine")
        return engine_cls(twin_model, AutoTokenizer.from_pretrained(model.path), twin, model_path=model.path)

    def colocated_transport(self, model: ModelConfig) -> WeightTransport | None:
        """``SharedStorageTransport`` when ``share_trainer_weights`` and the engine loads float32 (as the trainer's
        master weights are); None otherwise (the weights are copied)."""
        import torch

        from agentrl.models.loading import resolve_device, resolve_dtype

        if not self.share_trainer_weights or resolve_dtype(model.dtype, resolve_device(model.device)) != torch.float32:
            return None
        return SharedStorageTransport()

    def samples_like_an_fp32_trainer(self, model: ModelConfig) -> bool:
        """True when the engine computes in float32, as the trainer's master weights do (the same model, so its
        logprobs are the trainer's up to float rounding); False when it serves bfloat16 or float16 weights."""
        import torch

        from agentrl.models.loading import resolve_device, resolve_dtype

        return resolve_dtype(model.dtype, resolve_device(model.device)) == torch.float32

    async def preflight(self, model: ModelConfig) -> list[str]:
        """Device available, model directory present, and the worst-case key/value memory (nothing loads)."""
        from agentrl.engines.embedded.kv_cache import max_cols_bound
        from agentrl.models.loading import check_model_dir, resolve_device, resolve_dtype

        device = resolve_device(model.device)
        arch = json.loads((check_model_dir(model.path) / "config.json").read_text())
        dtype = str(resolve_dtype(model.dtype, device)).removeprefix("torch.")
        per_token = kv_bytes_per_token(arch, _DTYPE_BYTES[dtype])
        context = min(self.max_seq_len, int(arch.get("max_position_embeddings") or self.max_seq_len))
        columns = max_cols_bound(context)  # rows share one write column: a full window plus relayout headroom
        batch_gib = per_token * self.max_batch_size * columns / _GIB
        cache_gib = per_token * self.prefix_cache_tokens / _GIB
        return [
            f"engine embedded: loads {model.path} in process on {device} ({dtype}){self._kernels_note(dtype, device)}; "
            f"keys/values at most {batch_gib:.2f} GiB ({self.max_batch_size} rows x {columns} columns for "
            f"{context}-token sequences) + prefix cache {cache_gib:.2f} GiB"
        ]

    def _kernels_note(self, dtype: str, device: str) -> str:
        """Where a bf16 CPU engine's steps will run (SGLang's kernels or torch ops, and why)."""
        if dtype != "bfloat16" or not device.startswith("cpu"):
            return ""
        if self.cpu_kernels == "torch":
            return ", on torch ops (engine.cpu_kernels torch)"
        import torch

        from agentrl.engines.embedded.cpu.sglang import kernels_problem

        problem = kernels_problem(torch.bfloat16, torch.device("cpu"))
        if problem is None:
            return ", on SGLang's CPU kernels where the model's projection shapes fit them"
        if self.cpu_kernels == "sglang":
            return f", but engine.cpu_kernels sglang will fail to load: {problem}"
        return f", on torch ops ({problem})"


def kv_bytes_per_token(arch: Mapping[str, Any], dtype_bytes: int) -> int:
    """Key/value bytes one token holds across all layers, from a Hugging Face ``config.json`` mapping."""
    heads = int(arch.get("num_attention_heads") or 1)
    kv_heads = int(arch.get("num_key_value_heads") or heads)
    head_dim = int(arch.get("head_dim") or int(arch.get("hidden_size") or 0) // heads)
    return int(arch.get("num_hidden_layers") or 0) * 2 * kv_heads * head_dim * dtype_bytes
