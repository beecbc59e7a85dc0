"""DockerSandboxConfig.extra_tmpfs: more writable dirs, owned by the sandbox user, wiped by reset()."""

from __future__ import annotations

import pytest

from sandboxes import DockerSandboxConfig, make_sandbox
from sandboxes.docker_backend import docker_available


@pytest.mark.docker
def test_extra_tmpfs_is_writable_private_and_wiped_by_reset() -> None:
    if not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/docker_setup.sh)")
    box = make_sandbox(DockerSandboxConfig(extra_tmpfs={"/logs": 1024 * 1024}))
    try:
        assert box.exec(["sh", "-c", "echo 1 > /logs/x && stat -c '%a %u' /logs"], timeout_s=10).stdout == "700 65534\n"
        assert box.exec(["sh", "-c", "echo 1 > /opt/x"], timeout_s=10).exit_code != 0  # the rest stays read-only
        box.reset()
        assert box.exec(["ls", "-A", "/logs"], timeout_s=10).stdout == ""
    finally:
        box.close()
