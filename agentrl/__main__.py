"""``python -m agentrl`` (and ``torchrun ... -m agentrl train CONFIG``): the ``agentrl`` command."""

from agentrl.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
