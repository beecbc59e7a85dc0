"""``python -m agentrl`` is the ``agentrl`` command, so ``torchrun ... -m agentrl train CONFIG`` works."""

from __future__ import annotations

import sys

from agentrl.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
