"""bf16 weights in oneDNN's packed layout on CPU: ``F.linear``'s products, bit for bit, at up to twice the speed.

``F.linear`` on bf16 CPU tensors runs oneDNN's matmul, which lays the weight out in its blocked format on every
call; at decode sizes that copy costs as much as the product (measured on a 2-core AVX512-BF16 EPYC: one layer's
1536 x 576 projection 0.17 -> 0.08 ms at 24 rows, the 49152-row head 3.9 -> 1.8 ms; the results equal
``F.linear``'s exactly at 1 to 2048 rows). Packing once per weight version removes the copy. PyTorch's own
compiler does the same for frozen bf16 linears (``torch.ops.mkldnn._reorder_linear_weight``).

A packed weight is a copy, so it must follow every change of its source: the engine drops all packs at every weight
update and memory release (``LeanForward.drop_packed``), which also covers writes through another tensor that
shares the storage, and ``PackedWeight.validate`` re-packs when a source parameter was re-pointed or changed in
place (its ``_version``) outside the engine, checked whenever rows join.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F


def packing_problem(dtype: torch.dtype, device: torch.device) -> str | None:
    """Why bf16 weights cannot be packed here (None when they can: a probe matched ``F.linear`` exactly)."""
    if device.type != "cpu":
        return f"packing is for CPU tensors, the model is on {device.type}"
    if dtype != torch.bfloat16:
        return f"packing is for bfloat16 weights, the model is {dtype}"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN (mkldnn)"
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return "this torch build lacks mkldnn._reorder_linear_weight / _linear_pointwise"
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 64, generator=generator).to(torch.bfloat16)
    bias = torch.randn(48, generator=generator).to(torch.bfloat16)
    x = torch.randn(3, 64, generator=generator).to(torch.bfloat16)
    try:
        packed = linear_packed(x, ops._reorder_linear_weight(weight), bias)
    except RuntimeError as exc:  # e.g. a CPU without bf16 support in oneDNN
        return f"oneDNN refused a packed bf16 linear: {exc}"
    if not torch.equal(packed, F.linear(x, weight, bias)):
        return "a packed bf16 linear differed from F.linear on a probe"
    return None


def linear_packed(
    x_td: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, residual_td: torch.Tensor | None = None
) -> torch.Tensor:
    """``residual + x @ weight.T + bias`` with ``weight`` in oneDNN's packed layout (``PackedWeight.get``).

    Bit for bit what ``project_rows(..., weight_left=False)`` computes: without a bias the residual is oneDNN's
    fused add, which rounds once as ``torch.addmm`` does.
    """
    ops = torch.ops.mkldnn
    if residual_td is None:
        return ops._linear_pointwise(x_td, packed, bias, "none", [None], "")
    if bias is None:
        return ops._linear_pointwise.binary(x_td, residual_td, packed, None, "add")
    return residual_td + ops._linear_pointwise(x_td, packed, bias, "none", [None], "")


def pack_onednn(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in oneDNN's packed layout, what ``linear_packed`` reads."""
    return torch.ops.mkldnn._reorder_linear_weight(weight)


class PackedWeight:
    """One weight's packed copy, made on first use and rebuilt after any source parameter was re-pointed or changed
    in place: ``validate`` checks that (the lean forward calls it when rows join, with its other re-reads), and
    ``drop`` frees the copy (every weight update and memory release), so a decode step reads the copy unchecked.

    ``weight`` returns the tensor to pack (e.g. a fused q/k/v buffer); ``sources`` the parameters whose
    version counters move when it changes (the fused buffer's own counter does not: the parameters view it
    through ``.data``); ``pack`` makes the copy (default: oneDNN's layout, ``pack_onednn``).
    """

    def __init__(
        self,
        weight: Callable[[], torch.Tensor],
        sources: Callable[[], Sequence[torch.Tensor]],
        pack: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self._weight, self._sources = weight, sources
        self._pack = pack_onednn if pack is None else pack
        self._key: tuple[int, ...] = ()
        self._packed: torch.Tensor | None = None

    def _source_key(self) -> tuple[int, ...]:
        return tuple(v for t in self._sources() for v in (t.data_ptr(), t._version))

    def get(self) -> torch.Tensor:
        """The packed copy (made now if there is none; 2.6 µs a call were spent re-checking it on every matmul)."""
        if self._packed is None:
            self._packed = self._pack(self._weight().detach())
            self._key = self._source_key()
        return self._packed

    def validate(self) -> None:
        """Drop the copy if a source parameter was re-pointed or changed in place since it was made."""
        if self._packed is not None and self._source_key() != self._key:
            self.drop()

    def drop(self) -> None:
        """Free the packed copy (the next ``get`` packs again)."""
        self._packed, self._key = None, ()
