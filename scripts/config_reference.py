"""Write docs/config-reference.md from the config's pydantic models (``agentrl.job.config_reference``).

python scripts/config_reference.py          # rewrite the page
python scripts/config_reference.py --check  # exit 1 when the page is not current
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PAGE = ROOT / "docs" / "config-reference.md"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the page, or with --check compare it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="Compare instead of writing; exit 1 when it differs.")
    args = parser.parse_args(argv)
    from agentrl.job.config_reference import config_reference

    text = config_reference()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is not current: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
