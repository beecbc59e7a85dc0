"""Worker of the torchrun stop-agreement test: only rank 1 receives a real SIGTERM (during step 2); every rank
records its step-boundary decisions and writes them to ``OUT.rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main(out: str) -> None:
    """Five steps with a boundary decision each; the loop ends on a stop, as the training loop does."""
    import torch.distributed as tdist

    from agentrl.config.sections import TrainerConfig
    from agentrl.trainer.boundary import StepBoundaries
    from agentrl.trainer.distributed import close_distributed, init_distributed
    from agentrl.trainer.interrupt import StopSignals

    dist = init_distributed()
    decisions = []
    with StopSignals() as signals, signals.graceful():
        boundaries = StepBoundaries(
            TrainerConfig(steps=5, checkpoint_every_steps=100, checkpoint_every_s=None), dist, signals
        )
        for step in range(1, 6):
            if step == 2 and dist.rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler runs: rank 1 now wishes to stop, rank 0 knows nothing
            boundary = boundaries.decide(step, exhausted=False)
            decisions.append({"step": step, "save": boundary.save, "stop": boundary.stop})
            if boundary.stop:
                break
    with open(f"{out}.rank{dist.rank}.json", "w") as handle:
        json.dump({"requested": signals.requested, "decisions": decisions}, handle)
    close_distributed()  # as ``agentrl train`` does on an agreed stop
    assert not tdist.is_initialized()


if __name__ == "__main__":
    main(sys.argv[1])
