"""Sandbox benchmark (JSON on stdout): warm stateful cell latency vs a cold `docker run`, and the
throughput of trivial cells through a pool of 4. All ratios come from this one run.

Usage: .venv/bin/python bench/bench_sandbox.py [--cells 1000] [--seconds 5] [--cold 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import warnings
from collections.abc import Callable

from sandboxes import DockerSandbox, DockerSandboxConfig, ProcessSandbox, ProcessSandboxConfig, SandboxPool
from sandboxes.docker_backend import connect


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    """p50/p90/mean of a list of seconds, in milliseconds."""
    ordered = sorted(samples_s)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return {
        "p50_ms": round(pick(0.5), 3),
        "p90_ms": round(pick(0.9), 3),
        "mean_ms": round(statistics.fmean(ordered) * 1e3, 3),
        "n": len(ordered),
    }


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def warm_cells(sandbox: DockerSandbox | ProcessSandbox, n: int) -> dict[str, float]:
    time_calls(lambda: sandbox.run_python("print(1)", 10), 50)  # warm-up
    return percentiles_ms(time_calls(lambda: sandbox.run_python("print(1)", 10), n))


def cold_runs(config: DockerSandboxConfig, n: int) -> dict[str, dict[str, float]]:
    """A fresh `docker run` of the same code, and a fresh `docker exec` of python3 for context."""
    client = connect(config)
    run = lambda: client.containers.run(  # noqa: E731
        config.image, ["python3", "-c", "print(1)"], remove=True, network_mode="none", user=config.user
    )
    keeper = client.containers.run(config.image, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        execs = time_calls(lambda: keeper.exec_run(["python3", "-c", "print(1)"]), n)
    finally:
        keeper.remove(force=True)
    return {"docker_run": percentiles_ms(time_calls(run, n)), "docker_exec_python": percentiles_ms(execs)}


def _pool_worker(pool: SandboxPool, mode: str, stop: float, counts: list[int], i: int) -> None:
    while time.perf_counter() < stop:
        with pool.session() as sandbox:
            sandbox.run_python("print(1)", 10)
            counts[i] += 1
            while mode == "cells" and time.perf_counter() < stop:
                sandbox.run_python("print(1)", 10)
                counts[i] += 1


def pool_throughput(config: DockerSandboxConfig, seconds: float, threads: int = 4) -> dict[str, float]:
    """Cells/s with 4 threads each holding a sandbox of a pool of 4; episodes/s adds a release (reset) per cell."""
    out: dict[str, float] = {}
    with SandboxPool(config, size=4) as pool:
        for mode in ("cells", "episodes"):
            counts = [0] * threads
            start = time.perf_counter()
            workers = [
                threading.Thread(target=_pool_worker, args=(pool, mode, start + seconds, counts, i))
                for i in range(threads)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            out[f"{mode}_per_s"] = round(sum(counts) / (time.perf_counter() - start), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000, help="warm cells timed per backend")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each pool throughput run")
    parser.add_argument("--cold", type=int, default=5, help="cold docker runs timed")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    config = DockerSandboxConfig()
    start = time.perf_counter()
    with DockerSandbox(config) as sandbox:
        start_s = time.perf_counter() - start
        warm = warm_cells(sandbox, args.cells)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the process backend's weaker-isolation notice
        process_sandbox = ProcessSandbox(ProcessSandboxConfig())
    with process_sandbox:
        warm_process = warm_cells(process_sandbox, args.cells)
    cold = cold_runs(config, args.cold)
    report = {
        "docker_sandbox_start_s": round(start_s, 3),
        "warm_cell_docker": warm,
        "warm_cell_process": warm_process,
        "cold": cold,
        "cold_run_over_warm_cell_p50": round(cold["docker_run"]["p50_ms"] / warm["p50_ms"], 1),
        "pool4": pool_throughput(config, args.seconds),
        "targets": {"warm_p50_ms_max": 5.0, "cold_over_warm_min": 30.0, "pool4_cells_per_s_min": 300.0},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
