"""Snapshot images of the docker provider (``--snapshot-name IMAGE``): a ``docker commit``
of a guest container is the user's, whatever the image build does with its own images."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from parallel_rollout.errors import VMError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers.docker import image_tag
from parallel_rollout.pool.providers.docker_cli import LABEL, containers, docker, image_exists, remove_old_guest_images

#: an image kind of this test's own: the real guest and desktop images are never touched
KIND = f"prt-kind-{os.getpid()}"
REPO = f"prt-guest-{os.getpid()}"


def _import(tmp_path, tag: str, content: bytes) -> str:
    """``docker import`` of a one-file tree, labelled as the image build labels its images."""
    tarball = tmp_path / f"{tag.replace(':', '-')}.tar"
    with tarfile.open(tarball, "w") as archive:
        member = tarfile.TarInfo("marker")
        member.size = len(content)
        archive.addfile(member, io.BytesIO(content))
    docker("import", "--change", f"LABEL {LABEL}.image={KIND}", str(tarball), tag)
    return tag


@pytest.fixture
def images_of_test():
    made: list[str] = []
    yield made
    docker("rmi", "-f", *made, check=False)


def test_an_image_build_keeps_snapshots_committed_from_its_guest(docker_harness, tmp_path, images_of_test):
    old = _import(tmp_path, f"{REPO}:old", b"old build")
    # the user's snapshot: a container of the guest image, committed (it inherits the label)
    container = f"prt-snap-{os.getpid()}"
    docker("create", "--name", container, "--network", "none", old, "/marker")
    snapshot = f"prt-snapshot-{os.getpid()}:1"
    try:
        docker("commit", container, snapshot)
    finally:
        docker("rm", "-f", container, check=False)
    images_of_test += [snapshot, old]
    # an untagged image the commit did not make: what a --force build left of the last one
    untagged = docker("image", "inspect", "--format", "{{.Id}}",
                      _import(tmp_path, f"{REPO}:forced", b"forced build")).stdout.strip()
    docker("rmi", f"{REPO}:forced")
    images_of_test.append(untagged)
    new = _import(tmp_path, f"{REPO}:new", b"new build")
    images_of_test.append(new)

    remove_old_guest_images(keep=new, kind=KIND, log=lambda line: None)

    assert image_exists(snapshot), "the user's committed snapshot image was removed"
    assert not image_exists(old), "the earlier build's tag stayed"
    assert not image_exists(untagged), "the untagged earlier build stayed"
    assert image_exists(new)


def test_a_snapshot_with_an_entrypoint_and_a_user_of_its_own_boots_the_agent(docker_harness, images_of_test):
    """An image made FROM the guest with an ENTRYPOINT (a setup script) and a USER of its own:
    the agent is still the container's command, as root, and the commands run as the VM's uid."""
    container = f"prt-entry-{os.getpid()}"
    docker("create", "--name", container, "--network", "none", image_tag())
    snapshot = f"prt-entry-{os.getpid()}:1"
    try:
        docker("commit", "--change", 'ENTRYPOINT ["/bin/sh", "-c", "echo setting up; exec sleep 600"]',
               "--change", "USER 1000", container, snapshot)
    finally:
        docker("rm", "-f", container, check=False)
    images_of_test.append(snapshot)
    provider = docker_harness.provider(snapshot_name=snapshot, boot_timeout_s=20.0)
    info = provider.start("vm0")
    try:
        result = GuestClient(info.address).execute("id -u", shell=True)
        assert result["returncode"] == 0, result
        assert result["output"].strip() == str(info.private["uid"])
        info = provider.reset(info)  # the spare, made the same way
        assert GuestClient(info.address).execute("id -u", shell=True)["returncode"] == 0
    finally:
        provider.stop(info)


def test_a_start_that_fails_leaves_nothing_of_its_vm(docker_harness, tmp_path, images_of_test):
    """A snapshot image the agent cannot run in (no python3): ``start`` raises, and the VM's
    folder (the passwd, group and meta.json it wrote before the container) goes with the
    container; a caller of the provider itself has no VMInfo to ``stop``."""
    snapshot = _import(tmp_path, f"prt-nopython-{os.getpid()}:1", b"no python here")
    images_of_test.append(snapshot)
    provider = docker_harness.provider(snapshot_name=snapshot, boot_timeout_s=20.0)
    with pytest.raises(VMError, match="vm0"):
        provider.start("vm0")
    left = sorted(str(p) for p in provider.run_dir.rglob("*")) if provider.run_dir.exists() else []
    assert not left and not provider.run_dir.exists(), left
    assert not containers(f"{LABEL}.run={provider.run_id}")


def test_a_start_whose_baseline_fails_leaves_no_container(docker_harness, monkeypatch):
    """The reset check's baseline of the fresh container fails (``docker diff`` under
    --verify-reset full, an unreadable /proc): the container was left running."""
    provider = docker_harness.provider()

    def fail(*args, **kwargs):
        raise VMError("cannot list the container's writable layer (the test's)")

    monkeypatch.setattr(provider._view, "baseline", fail)
    with pytest.raises(VMError, match="the test's"):
        provider.start("vm0")
    assert not provider.run_dir.exists()
    assert not containers(f"{LABEL}.run={provider.run_id}")
