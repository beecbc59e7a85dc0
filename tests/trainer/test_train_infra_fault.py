"""``agentrl train`` under a real infrastructure fault mid-step: the grading containers of one task are killed
from outside (the Docker engine's own kill) while they grade, the first grading and its retry alike. The job
goes on: those episodes are kept and stored with ``infra_failure`` and no reward, counted in
``rollout/infra_failures`` and left out of the loss and the reward means, while the step trains on the other
episodes, stores every episode and writes its checkpoint.

The env (``durability_envs:CannedCodeExec``) submits canned solutions whatever the tiny model writes: the
doomed task's is correct but sleeps in every call, the others' are fast; the killer kills every container of
this test whose solution service has run longer than a fast grading ever takes.
"""

from __future__ import annotations

import gzip
import json
import math
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from durability_envs import DOOMED_SLEEP_S, DOOMED_TASK, SOLVED_TASK, SPLIT_TASK
from test_train_interrupt_kill import quickstart_like, start_train

from agentrl.trajectory import Episode

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LABEL = "agentrl-test-train-infra-fault"
GROUP = 2
# A fast grading's solution service lives well under a second; the doomed one sleeps DOOMED_SLEEP_S in its
# first call. Whole seconds: ps reports a process's age in them.
KILL_AFTER_S = 4
assert KILL_AFTER_S + 2 < DOOMED_SLEEP_S


def solution_service_age(container: Any) -> int | None:
    """Seconds the container's solution service has run (None when it runs none), from the engine's ``top``.

    A sandbox runs its session supervisor (a python3 process whose parent is outside the container) and that
    supervisor's worker; a service (grading's solution service) is a further child of the supervisor, started
    after the worker, so it is the youngest of them. Its age comes from ps, not from when the killer saw it.
    """
    top = container.top(ps_args="-eo pid,ppid,etimes,comm")
    pid, ppid, age, command = (top["Titles"].index(t) for t in ("PID", "PPID", "ELAPSED", "COMMAND"))
    pythons = {row[pid]: row for row in top["Processes"] or [] if row[command].startswith("python")}
    supervisors = {p for p, row in pythons.items() if row[ppid] not in pythons}
    children = [int(row[age]) for row in pythons.values() if row[ppid] in supervisors]
    return min(children) if len(children) >= 2 else None


def kill_long_gradings(client: Any, run: str, stop: threading.Event, killed: set[str]) -> None:
    """Until ``stop``: kill (the engine's own kill) every container of this run serving for KILL_AFTER_S or more."""
    import docker.errors

    while not stop.is_set():
        try:
            containers = client.containers.list(filters={"label": f"{LABEL}={run}"}, ignore_removed=True)
        except docker.errors.APIError:
            containers = []  # the next poll lists them again
        for container in containers:
            try:
                age = solution_service_age(container)
                if age is not None and age >= KILL_AFTER_S:
                    container.kill()
                    killed.add(container.id)
            except (docker.errors.NotFound, docker.errors.APIError):
                pass  # removed or stopped since the listing (the pool removes each used grading sandbox)
        stop.wait(0.2)


def infra_fault_config(tmp_path: Path, model_dir: Path, run: str) -> Path:
    """quickstart_like, one step of three groups of two (one per canned task), no held-out evaluation."""
    path = quickstart_like(tmp_path, model_dir, "docker")
    cfg = yaml.safe_load(path.read_text())
    cfg["env"]["id"] = "durability_envs:CannedCodeExec"
    cfg["env"]["kwargs"] = {
        "test_timeout_s": DOOMED_SLEEP_S + 8,  # slow, not timed out: only the kills fail its gradings
        "grading_timeout_s": 3 * (DOOMED_SLEEP_S + 8),
        "sandbox": {"kind": "docker", "labels": {LABEL: run}},
    }
    cfg["rollout"].update(group_size=GROUP, prompts_per_step=3, partial_rollout=False, max_new_tokens=4)
    cfg["trainer"].update(steps=1, checkpoint_every_steps=1)
    cfg["eval"].update(splits=[])
    path.write_text(yaml.safe_dump(cfg))
    return path


def trained_episodes(run_dir: Path, step: int) -> dict[str, list[Episode]]:
    """The episodes of ``step``'s trained groups, by task, from its trajectory archive file."""
    out: dict[str, list[Episode]] = {}
    with gzip.open(run_dir / "trajectories" / f"step_{step:06d}.jsonl.gz", "rt") as handle:
        for line in handle:
            record = json.loads(line)
            assert record["state"] == "trained" and record["step"] == step, record["state"]
            assert record["task_id"] not in out, f"two groups of {record['task_id']}"
            out[record["task_id"]] = [Episode.model_validate(e) for e in record["episodes"]]
    return out


def test_a_grading_killed_mid_step_is_left_out_while_the_step_trains_on_the_rest(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import docker
    import docker.errors

    from sandboxes import docker_available

    if not docker_available():  # a skip of this docker-marked test fails under CI=true (tests/conftest.py)
        pytest.skip("no Docker engine with the sandbox image")
    run = uuid.uuid4().hex
    config, log = infra_fault_config(tmp_path, tiny_model_dir, run), tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "run"
    client = docker.from_env()
    stop, killed = threading.Event(), set[str]()
    killer = threading.Thread(target=kill_long_gradings, args=(client, run, stop, killed), daemon=True)
    killer.start()
    try:
        proc = start_train(config, log)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        stop.set()
        killer.join()
        leftovers = client.containers.list(all=True, filters={"label": f"{LABEL}={run}"}, ignore_removed=True)
        for container in leftovers:
            try:
                container.remove(force=True)  # this test's own containers
            except docker.errors.NotFound:
                pass
    assert leftovers == []  # a job that ends normally removes its own containers, the killed ones too
    assert len(killed) == 2 * GROUP, killed  # each doomed episode's first grading and its retry, nothing else

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    [step] = [r for r in records if "episode/reward_mean" in r]
    assert step["step"] == 1
    assert step["rollout/infra_failures"] == GROUP  # the doomed group's episodes, counted
    # ... and left out of the loss: the step trained (one optimizer step) on the split group alone, the only
    # group whose scored episodes differ; the doomed rows and the all-solved group's have zero advantage.
    assert step["train/optimizer_steps"] == 1 and step["train/trained_tokens"] > 0, step
    assert math.isfinite(step["train/loss"]) and step["train/grad_norm"] > 0, step
    assert (step["train/rows"], step["train/skipped_zero_adv_rows"]) == (3 * GROUP, 2 * GROUP), step
    assert step["episode/reward_mean"] == pytest.approx(3 / 4)  # 1, 1 | 1, 0: no 0 for the doomed ones
    assert step["episode/success_rate"] == pytest.approx(3 / 4)  # nor a failure
    assert step["reward/hack_suspect_frac"] == 0.0  # nor a hack suspect (their grading_error flags)

    episodes = trained_episodes(run_dir, 1)  # every episode of the step stored
    assert sorted(episodes) == sorted([DOOMED_TASK, SOLVED_TASK, SPLIT_TASK])
    assert all(len(group) == GROUP for group in episodes.values()), episodes
    for episode in episodes[DOOMED_TASK]:
        assert (episode.infra_failure or "").startswith("grading failed twice"), episode.infra_failure
        assert "stopped from outside" in (episode.infra_failure or ""), episode.infra_failure
        assert episode.final_reward is None and episode.status == "complete"
    assert [(e.final_reward, e.infra_failure) for e in episodes[SOLVED_TASK]] == [(1.0, None)] * GROUP
    assert sorted(e.final_reward or 0.0 for e in episodes[SPLIT_TASK]) == [0.0, 1.0]
    assert not any(e.infra_failure for e in episodes[SPLIT_TASK])

    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000001"  # the last step's
