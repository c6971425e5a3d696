"""Reset verification on the docker provider: the container's home (the image's is the
snapshot), /tmp and processes, seen from the host through /proc/<docker-init>/root."""

from __future__ import annotations

from parallel_rollout.guest.client import GuestClient

#: what a task leaves: a daemon in a session of its own, files in the home and /tmp
ESCAPE = ("setsid sleep 600 > /dev/null 2>&1 < /dev/null & "
          "mkdir -p ~/.cache && echo kept > ~/.cache/secret && echo kept > /tmp/stash")


def test_docker_escapes_are_seen_and_a_reset_is_clean(docker_harness):
    provider = docker_harness.provider(verify_reset="full")
    info = provider.start("vm0")
    try:
        assert "init_pid" in info.private, "this host cannot see the container's init"
        assert provider.verify(info) == []
        GuestClient(info.address).execute(ESCAPE, shell=True)
        found = provider.verify(info)  # a reset that did nothing
        assert any("sleep 600" in line and "left running" in line for line in found), found
        assert "/home/user/.cache/secret: not in the snapshot (file, 5 bytes)" in found
        assert "/tmp/stash: not in the snapshot (file)" in found
        for _ in range(2):  # the spare container, then a fresh boot's
            info = provider.reset(info)
            assert provider.verify(info) == []
    finally:
        provider.stop(info)
