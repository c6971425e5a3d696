"""Reset verification on the docker provider: the container's home (the image's is the
snapshot), /tmp and processes, seen from the host through /proc/<docker-init>/root; in full
its whole writable layer (docker diff)."""

from __future__ import annotations

from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.docker_cli import GUEST_HOME
from parallel_rollout.pool.providers.layer_diff import LayerView

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


#: what a task may write outside the home, /tmp and /dev/shm as the sandbox user
OUTSIDE = "echo kept > /var/tmp/stash && mkdir /run/lock/held"


def test_full_diffs_the_whole_writable_layer_and_fast_does_not(docker_harness):
    provider = docker_harness.provider(verify_reset="full")
    info = provider.start("vm0")
    # what the provider does with --verify-reset fast, on the same container
    fast = LayerView("fast", GUEST_HOME, None)
    look = lambda info: (info.vm_id, info.private["init_pid"], info.address, info.private["name"])  # noqa: E731
    fast.baseline(*look(info)[:3], container=info.private["name"])
    try:
        assert provider.verify(info) == []  # the agent's own runtime paths are the snapshot's
        result = GuestClient(info.address).execute(OUTSIDE, shell=True)
        assert result["returncode"] == 0, result
        found = provider.verify(info)  # a reset that did nothing
        layer = "in the container's writable layer (docker diff), not in a fresh container's"
        assert found == [f"/run/lock/held: added {layer}", f"/var/tmp/stash: added {layer}"], found
        assert fast.check(*look(info)) == []  # fast does not look past the home, /tmp, /dev/shm
        info = provider.reset(info)
        assert provider.verify(info) == []  # the spare: a fresh layer
    finally:
        provider.stop(info)
