"""Checkpoints: HF-loadable model, optimizer/RNG round trip, buffer copy, pruning, incomplete dirs ignored."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from agentrl.errors import CheckpointError
from agentrl.trainer.checkpoint import (
    BUFFER_FILE,
    SPACE_MARGIN_BYTES,
    latest_checkpoint,
    load_training_state,
    require_space,
    restore_buffer,
    save_checkpoint,
    set_rng_state,
)


def test_checkpoint_round_trip_and_pruning(tiny_lm: torch.nn.Module, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    opt = torch.optim.AdamW(tiny_lm.parameters(), lr=1e-3)
    tiny_lm(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    with sqlite3.connect(tmp_path / BUFFER_FILE) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
        db.execute("INSERT INTO t VALUES (7)")
    state = {k: v.detach() for k, v in tiny_lm.state_dict().items()}
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path,
            step,
            lm=tiny_lm,
            state=state,
            tokenizer=None,
            training_state={"optimizer": opt.state_dict()},
            meta={"note": "x"},
            keep=2,
        )
    expected_draw = (random.random(), torch.rand(1).item())  # the RNG continues from the last save
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.step == 3 and ckpt.meta["note"] == "x"
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000002", "step_000003"]
    reloaded = AutoModelForCausalLM.from_pretrained(ckpt.model_dir, dtype=torch.float32)
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in state.items())
    training = load_training_state(ckpt)
    assert training["optimizer"]["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    random.random()
    set_rng_state(training["rng"])
    assert (random.random(), torch.rand(1).item()) == expected_draw
    with sqlite3.connect(tmp_path / BUFFER_FILE) as db:
        db.execute("INSERT INTO t VALUES (8)")  # the live buffer moves on after the checkpoint
    restore_buffer(ckpt, tmp_path)
    with sqlite3.connect(tmp_path / BUFFER_FILE) as db:
        assert db.execute("SELECT x FROM t").fetchall() == [(7,)]


def test_incomplete_checkpoint_is_reported(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "step_000005").mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").write_text("step_000005\n")
    with pytest.raises(CheckpointError, match="incomplete"):
        latest_checkpoint(tmp_path)
    assert latest_checkpoint(tmp_path / "fresh") is None


def test_checkpoint_is_fsynced_before_the_renames_that_publish_it(
    tiny_lm: torch.nn.Module, tmp_path: Path, disk_journal: Any
) -> None:
    with sqlite3.connect(tmp_path / BUFFER_FILE) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
    state = {k: v.detach() for k, v in tiny_lm.state_dict().items()}
    final = save_checkpoint(
        tmp_path, 4, lm=tiny_lm, state=state, tokenizer=None, training_state={}, meta={}, keep=2
    ).resolve()
    root, tmp = final.parent, final.parent / ".tmp-step_000004"
    published = disk_journal.index("replace", f"{tmp} -> {final}")
    written = [p for p in final.rglob("*")]
    assert {p.name for p in written} >= {"model.safetensors", "config.json", BUFFER_FILE, "training_rank0.pt"}
    for path in [*written, final]:  # every file and directory, under its temporary name, before the rename
        assert disk_journal.fsynced(tmp / path.relative_to(final) if path != final else tmp) < published, path
    assert disk_journal.index("fsync", tmp_path.resolve()) < published  # the new checkpoints/ entry
    assert disk_journal.fsynced(root) > published  # the rename itself
    pointer = disk_journal.index("replace", f"{root / '.latest.tmp'} -> {root / 'latest'}")
    assert published < disk_journal.fsynced(root / ".latest.tmp") < pointer < disk_journal.fsynced(root)


def test_a_run_directory_or_its_latest_pointer_names_the_latest_checkpoints_model(tmp_path: Path) -> None:
    import json

    from agentrl.errors import CheckpointError
    from agentrl.trainer.checkpoint import model_dir_of

    run = tmp_path / "run"
    for step in (1, 2):
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        (ckpt / "model").mkdir(parents=True)
        (ckpt / "model" / "config.json").write_text("{}")
        (ckpt / "trainer_state.json").write_text(json.dumps({"step": step}))
    (run / "checkpoints" / "latest").write_text("step_000002\n")
    model = run / "checkpoints" / "step_000002" / "model"
    for given in (run, run / "checkpoints", run / "checkpoints" / "latest", model.parent, model):
        assert model_dir_of(given) == model, given
    assert model_dir_of(str(run / "checkpoints" / "latest")) == model
    with pytest.raises(CheckpointError, match="neither a model directory"):
        model_dir_of(tmp_path / "elsewhere")


def test_too_little_disk_space_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    require_space(tmp_path / "not" / "made" / "yet", 1024, "a small checkpoint")  # the nearest existing parent
    with pytest.raises(CheckpointError) as info:
        require_space(tmp_path, free + 2**30, "the checkpoint of step 3")
    message = str(info.value)
    assert message.startswith("the checkpoint of step 3 needs about")
    assert "trainer.keep_checkpoints" in message and "logging.run_root" in message


def test_a_checkpoint_that_does_not_fit_is_refused_before_anything_is_written(
    tiny_lm: torch.nn.Module, tmp_path: Path
) -> None:
    """On a real small file system (a tmpfs), filled by a real file: the refused checkpoint leaves the last one
    the latest and no partial directory behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    size_mb = SPACE_MARGIN_BYTES // 2**20 + 64
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        state = {k: v.detach() for k, v in tiny_lm.state_dict().items()}
        kwargs: dict[str, Any] = {"lm": tiny_lm, "state": state, "tokenizer": None, "training_state": {}, "meta": {}}
        save_checkpoint(disk, 1, **kwargs)
        with open(disk / "filler", "wb") as filler:  # leaves less than the margin free
            filler.write(b"\0" * (shutil.disk_usage(disk).free - SPACE_MARGIN_BYTES // 2))
        with pytest.raises(CheckpointError, match="the checkpoint of step 2 needs about"):
            save_checkpoint(disk, 2, **kwargs)
        latest = latest_checkpoint(disk)
        assert latest is not None and latest.step == 1
        assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["latest", "step_000001"]
    finally:
        subprocess.run(["umount", str(disk)], check=True, capture_output=True)
