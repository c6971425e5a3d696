"""The second stage of a guest image: apt-get install over the cached debootstrap tree.

Both tests start from the cached minbase+python3 tarball (built once by whichever test needs
it first) copied into a cache folder of their own, so nothing here debootstraps and nothing
touches the real cache's other entries. apt-get reaches Debian's package mirror, as the image
builds do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time

import psutil
import pytest

from parallel_rollout.errors import VMError
from parallel_rollout.pool.providers import images

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None
                                or shutil.which("debootstrap") is None,
                                reason="image builds need root, bwrap and debootstrap")


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache folder holding only a copy of the plain guest tree's tarball."""
    base = images.rootfs_tarball(images.GUEST_PACKAGES, log=lambda line: None)
    cache = tmp_path / "cache"
    (cache / "rootfs").mkdir(parents=True)
    shutil.copyfile(base, cache / "rootfs" / base.name)
    monkeypatch.setenv(images.CACHE_ENV, str(cache))
    return cache


@pytest.mark.slow
def test_apt_stage_installs_over_the_cached_tree_and_is_cached_itself(own_cache):
    lines: list[str] = []
    built = images.rootfs_tarball(images.GUEST_PACKAGES, apt_install=["hello"], log=lines.append)
    assert not any("debootstrap" in line for line in lines), "stage 1 should come from the cache"
    assert any("apt-get install hello" in line for line in lines)
    with tarfile.open(built) as archive:
        names = set(archive.getnames())
    assert "./usr/bin/hello" in names and "./usr/bin/python3" in names
    assert "./usr/sbin/policy-rc.d" not in names, "the build's policy-rc.d stayed in the image"
    tree = own_cache / "tree"
    images.build_rootfs(tree, images.GUEST_PACKAGES, apt_install=["hello"], log=lines.append)
    assert subprocess.run(["chroot", str(tree), "/usr/bin/hello"], capture_output=True,
                          text=True, timeout=30).stdout.strip() == "Hello, world!"

    again: list[str] = []
    assert images.rootfs_tarball(images.GUEST_PACKAGES, apt_install=["hello"], log=again.append) == built
    assert any("rootfs cached" in line for line in again) and not any("apt-get" in line for line in again)
    # the plain tree and the one with the second stage are cached apart
    plain = images.rootfs_tarball(images.GUEST_PACKAGES, log=lambda line: None)
    assert plain != built and "./usr/bin/hello" not in set(tarfile.open(plain).getnames())


def test_a_package_apt_cannot_find_is_a_clear_error_and_leaves_nothing(own_cache):
    before = sorted(p.name for p in (own_cache / "rootfs").iterdir())
    with pytest.raises(VMError) as failure:
        images.rootfs_tarball(images.GUEST_PACKAGES, apt_install=["no-such-package-pr"],
                              log=lambda line: None)
    message = str(failure.value)
    assert message.startswith("apt-get failed") and "no-such-package-pr" in message
    after = sorted(p.name for p in (own_cache / "rootfs").iterdir() if not p.name.endswith(".lock"))
    assert after == [name for name in before if not name.endswith(".lock")], \
        "a failed build left a tarball or a build folder"


def test_a_killed_builds_folder_goes_at_the_next_build(tmp_path, monkeypatch):
    """A build killed mid-way (a cron job's `timeout` fires: SIGTERM, no clean-up) left its
    `.build-<key>-*` tree in the cache for ever, 2 GB for the desktop's; the next build of
    that tree removes it (each build holds the tree's lock while its folder is in use)."""
    monkeypatch.setenv(images.CACHE_ENV, str(tmp_path / "cache"))
    tarball = images.rootfs_tarball_path(images.GUEST_PACKAGES)
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(b"")  # built already: the build is a no-op
    key = tarball.stem.rsplit("-", 1)[1]
    stale = tarball.parent / f".build-{key}-x1y2z3"
    (stale / "rootfs" / "usr").mkdir(parents=True)
    other = tarball.parent / ".build-0123456789abcdef-x1y2z3"  # another tree's: its own build's
    other.mkdir()
    assert images.rootfs_tarball(images.GUEST_PACKAGES, log=lambda line: None) == tarball
    assert not stale.exists() and other.exists()


def test_a_killed_build_leaves_no_program_of_it_running(tmp_path):
    """SIGKILL (or a SIGTERM, whose default ends Python at once) of a build under way ends the
    program it runs (debootstrap, apt-get, tar): debootstrap ran on, an orphan."""
    script = ("import sys; from parallel_rollout.pool.providers import images; "
              "images._run_logged(['sleep', '60'], print, timeout=120, what='sleep')")
    build = subprocess.Popen([sys.executable, "-c", script])
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while not (children := psutil.Process(build.pid).children(recursive=True)):
            assert time.monotonic() < deadline, "the build started no program"
            time.sleep(0.05)
        build.kill()
        build.wait()
        assert psutil.wait_procs(children, timeout=10)[1] == [], "the build's program outlived it"
    finally:
        build.kill()
        for child in children:
            if child.is_running():
                child.kill()
