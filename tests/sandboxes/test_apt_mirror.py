"""The sandbox image build takes its Debian mirror from the machine's own apt configuration (issue 31.12)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "sandboxes" / "images" / "python" / "apt_mirror.sh"
LOCAL = "http://apt-cache.internal:3142/mirror"  # a local mirror whose path does not end in "debian"
DEB822 = f"""Types: deb
URIs: {LOCAL}-security/
Suites: bookworm-security
Components: main

Types: deb
URIs: {LOCAL}/
Suites: bookworm bookworm-updates
Components: main
"""


def _mirror(tmp_path: Path, sources_list: str = "", parts: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "parts").mkdir()
    (tmp_path / "sources.list").write_text(sources_list)
    for name, text in (parts or {}).items():
        (tmp_path / "parts" / name).write_text(text)
    conf = tmp_path / "apt.conf"
    conf.write_text(
        f'Dir::Etc::sourcelist "{tmp_path}/sources.list";\nDir::Etc::sourceparts "{tmp_path}/parts";\n'
        f'Dir::State::lists "{tmp_path}/lists";\n'
    )
    env = {**os.environ, "APT_CONFIG": str(conf)}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture(autouse=True)
def _needs_apt() -> None:
    if subprocess.run(["sh", "-c", "command -v apt-get"], capture_output=True).returncode:
        pytest.skip("apt-get is not installed (the image build needs a Debian-family machine)")


def test_a_local_mirror_in_deb822_sources_is_used(tmp_path: Path) -> None:
    done = _mirror(tmp_path, parts={"local.sources": DEB822})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == LOCAL


def test_one_line_sources_work_too(tmp_path: Path) -> None:
    done = _mirror(tmp_path, sources_list=f"deb {LOCAL}-security bookworm-security main\ndeb {LOCAL} bookworm main\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == LOCAL


def test_no_apt_source_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    done = _mirror(tmp_path)
    assert done.returncode == 1 and "DEBIAN_MIRROR" in done.stderr and not done.stdout
