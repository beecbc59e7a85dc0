"""The policy trainer: update loop, weight sync, checkpoints, logging (docs/design.md#trainer)."""

from agentrl.trainer.batch import MicroBatch, TrainRow, build_rows, pack_micro_batches
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.loop import train, train_async
from agentrl.trainer.sync import sync_weights
from agentrl.trainer.update import PolicyUpdater
from agentrl.trainer.validate import validate_run_config

__all__ = [
    "MicroBatch",
    "PolicyLogprobs",
    "PolicyUpdater",
    "TrainRow",
    "build_rows",
    "pack_micro_batches",
    "sync_weights",
    "train",
    "train_async",
    "validate_run_config",
]
