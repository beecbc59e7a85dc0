"""Time, tokens, tool waits, evaluations and peak memory of finished training runs, one JSON line per run.

    python bench/studies/run_summary.py RUN_DIR[=TIME_LOG] ...

``TIME_LOG`` (optional) is the output of ``/usr/bin/time -v agentrl train ...``: its wall time and peak RSS
are added. The training steps' time is the sum of ``perf/step_s`` (rollout ``rollout/wall_s``, update
``train/time_s``); tool time is each turn's ``sandbox_time_s`` from the stored trajectories; the held-out
numbers are each split's pass@1 before and after, from ``eval-*.json``. The main job's side-by-side tables in
docs/results/memory-and-speed.md are read this way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any


def step_totals(run: Path) -> dict[str, float]:
    """Sums over the training steps' metrics rows."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row for row in rows if "perf/step_s" in row]
    if not steps:
        raise SystemExit(f"{run}: metrics.jsonl has no training step (perf/step_s); did the run train?")

    def total(key: str) -> float:
        return float(sum(row.get(key, 0.0) for row in steps))

    update_s, trained = total("train/time_s"), total("train/trained_tokens")
    return {
        "steps": len(steps),
        "steps_s": total("perf/step_s"),
        "rollout_s": total("rollout/wall_s"),
        "update_s": update_s,
        "tokens_generated": total("rollout/tokens_generated"),
        "trained_tokens": trained,
        "update_tokens_per_s_per_trained_token": trained / update_s if update_s else 0.0,
    }


def tool_times(run: Path) -> dict[str, float]:
    """Sum and longest of the turns' sandbox time over the stored trajectories."""
    times: list[float] = []
    for path in sorted((run / "trajectories").glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as stream:
            for line in stream:
                for episode in json.loads(line)["episodes"]:
                    times += [float(turn.get("info", {}).get("sandbox_time_s") or 0.0) for turn in episode["turns"]]
    return {"tool_s": sum(times), "longest_tool_call_s": max(times, default=0.0), "turns": len(times)}


def evaluations(run: Path) -> dict[str, float]:
    """pass@1 of each evaluated split, before and after training."""
    out: dict[str, float] = {}
    for path in sorted(run.glob("eval-*.json")):
        when, split = path.stem.removeprefix("eval-").split("-", 1)
        out[f"{split}_{when}"] = float(json.loads(path.read_text())["mean_reward"])
    return out


def time_log(path: Path) -> dict[str, float]:
    """Wall time and peak RSS from GNU time's verbose output."""
    text = path.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if wall is None or rss is None:
        raise SystemExit(f"{path}: no GNU time -v summary (run the job as /usr/bin/time -v agentrl train ...)")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return {"wall_s": seconds, "peak_rss_gib": int(rss.group(1)) / 2**20}


def summarize(run: Path, log: Path | None) -> dict[str, Any]:
    """One run's summary."""
    summary: dict[str, Any] = {"run": str(run), **step_totals(run), **tool_times(run), **evaluations(run)}
    if log is not None:
        summary.update(time_log(log))
    return {key: round(value, 3) if isinstance(value, float) else value for key, value in summary.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="RUN_DIR or RUN_DIR=TIME_LOG")
    for spec in parser.parse_args().runs:
        run, _, log = spec.partition("=")
        print(json.dumps(summarize(Path(run), Path(log) if log else None)))


if __name__ == "__main__":
    main()
