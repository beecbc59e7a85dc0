"""``bench/bench_roofline.py --kinds native avx2``: the whole roofline run once per instruction-set kind, on one
machine, each in its own process (torch, oneDNN and MKL fix their instruction set when they load), alternating kinds
round after round, into one JSON with each kind's fractions side by side.

``native``: everything this CPU has; ``avx2``: the portable path forced on a CPU with AVX-512 (torch's kernels by
``ATEN_CPU_CAPABILITY``, oneDNN's by ``ONEDNN_MAX_CPU_ISA``, MKL's by ``MKL_ENABLE_INSTRUCTIONS``, agentrl's kernel
selection by ``AGENTRL_CPU_CAPABILITY``). Each fraction is against the roofline measured in its own process, so a
load that changes between the two runs moves measured speed and roofline together; ``--rounds`` > 1 keeps each
kind's round with the best headline sum.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KIND_ENV = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "AGENTRL_CPU_CAPABILITY": "avx2",
    },
}


def _strip_kinds(argv: list[str]) -> list[str]:
    """``argv`` without ``--kinds ...``, ``--rounds N`` and ``--out PATH`` (the parent writes the combined report)."""
    out, skip = [], False
    for arg in argv:
        if arg in ("--kinds", "--rounds", "--out"):
            skip = True
            continue
        if skip and not arg.startswith("--"):
            continue
        skip = False
        out.append(arg)
    return out


def _one(kind: str, argv: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / f"{kind}.json"
        cmd = [sys.executable, str(Path(__file__).with_name("bench_roofline.py")), *argv, "--out", str(out)]
        env = {**os.environ, **KIND_ENV[kind]}
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def headline(report: dict[str, Any]) -> dict[str, float]:
    """The fp32 numbers a kind is judged by: decode's fraction of the fp32 roofline per batch, prefill's fraction,
    the trainer's forward+backward fraction of the GEMM rate without and with checkpointing."""
    fp32 = report["engine"]["fp32"]
    cells = {f"decode_{b}": c["fraction_of_fp32_roofline"] for b, c in fp32["decode"].items()}
    cells["prefill"] = fp32["prefill"]["fraction"]
    for ckpt in ("nockpt", "ckpt"):
        if f"fp32_{ckpt}" in report["trainer"]:
            cells[f"train_{ckpt}"] = report["trainer"][f"fp32_{ckpt}"]["mfu"]
    return cells


def run_kinds(argv: list[str], kinds: list[str], rounds: int) -> dict[str, Any]:
    """Every kind's full report (its round with the best headline sum) and the headlines side by side."""
    child = _strip_kinds(argv)
    reports: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for _ in range(rounds):
        for kind in kinds:
            reports[kind].append(_one(kind, child))
            print(json.dumps({"kind": kind, "headline": headline(reports[kind][-1])}), file=sys.stderr, flush=True)
    best = {kind: max(runs, key=lambda r: sum(headline(r).values())) for kind, runs in reports.items()}
    table = {kind: headline(report) for kind, report in best.items()}
    side = {}
    if {"native", "avx2"} <= set(kinds):
        side = {k: table["avx2"][k] / table["native"][k] for k in table["native"] if k in table["avx2"]}
    return {"kinds": best, "headline": table, "avx2_over_native": side, "env": KIND_ENV, "rounds": rounds}
