"""Joining a Ray cluster whose head has Ray's token authentication on, as README's "Past one
machine" says it: ``ray start --address`` with the cluster's token and ``RAY_AUTH_MODE=token``
(tests/ray_cluster.py's ``ray_start_node``, on 127.0.0.1). Without RAY_AUTH_MODE the token
alone is not sent, and Ray refuses the node: ``InvalidAuthToken``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import TOKEN_HEAD, own_ray_tmp, ray_start_node

_STARTED, _REFUSED = "Ray runtime started", "InvalidAuthToken"


def _joined(address: str, log: Path) -> str:
    """What ``ray start --address`` said of its join within 90 s: started or refused."""
    with ray_start_node(address, log):
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            said = log.read_text()
            if _STARTED in said or _REFUSED in said:
                return _STARTED if _STARTED in said else _REFUSED
            time.sleep(0.5)
    raise AssertionError(f"the node neither started nor was refused: {log.read_text()[-2000:]}")


@pytest.mark.slow
def test_a_host_joins_a_token_cluster_with_its_token_and_ray_auth_mode(tmp_path, monkeypatch):
    with own_ray_tmp("pr-tkj-") as ray_tmp:
        monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
        monkeypatch.setenv("RAY_AUTH_TOKEN", "d" * 32)
        head = subprocess.Popen([sys.executable, "-c", TOKEN_HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, RAY_AUTH_MODE="token"))
        try:
            address = head.stdout.readline().strip()
            assert address, "the token cluster did not start"
            monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # the token alone
            assert _joined(address, tmp_path / "token-alone.log") == _REFUSED
            monkeypatch.setenv("RAY_AUTH_MODE", "token")  # as the README says
            assert _joined(address, tmp_path / "with-mode.log") == _STARTED
        finally:
            head.stdin.close()
            head.wait(60)
