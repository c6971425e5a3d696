"""Boot time, reset time and memory per VM of every provider that can run here.

    python benchmarks/providers.py                       # every available provider
    python benchmarks/providers.py --providers docker --resets 40 --gap 0.5
    python benchmarks/providers.py --start-dockerd       # start (and then stop) a daemon
    python benchmarks/providers.py --desktop             # VMs with a desktop (osworld mode)

For each provider: ``--boots`` starts of one VM (each stopped again), then one VM reset
``--resets`` times, twice: with ``--gap`` seconds of use between resets (a command runs, a
file is written, then the VM idles, as under a task), and back to back. Memory is what the
VM's processes cost the host: RSS and PSS summed over them (PSS shares libraries fairly),
for docker with each container's containerd-shim and the spare container started ahead
(see providers/docker.py), for process with its standby sandbox (providers/standby.py),
plus the cgroup's own count from ``docker stats``. A provider that cannot run
here is listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from parallel_rollout.errors import ConfigError, ProviderUnavailable
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.pool.providers import get_provider
from parallel_rollout.pool.providers.base import ProviderOptions

ROOT = Path(__file__).resolve().parents[1]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def describe(values: list[float]) -> str:
    return (f"p50 {quantile(values, 0.5) * 1000:7.1f} ms  p95 {quantile(values, 0.95) * 1000:7.1f} ms"
            f"  (n={len(values)})")


def vm_roots(name: str, provider, info) -> list[int]:
    """Host pids at the top of the VM's process trees (the active VM and any spare)."""
    private = info.private
    if name == "process":
        roots = [private["pid"]]
        standby = provider._standby._next.get(info.vm_id)  # noqa: SLF001 - its standby sandbox
        if standby is not None:
            try:
                roots.append(standby.result(timeout=60).private["pid"])
            except Exception:  # noqa: BLE001 - no standby: nothing more to count
                pass
        return roots
    if name == "docker":
        roots = [private.get("init_pid")]
        spare = provider._spares.get(info.vm_id)  # noqa: SLF001 - a benchmark may look inside
        if spare is not None:
            try:
                roots.append(spare.result(timeout=60).private.get("init_pid"))
            except Exception:  # noqa: BLE001 - no spare: nothing more to count
                pass
        # count each container's containerd-shim too: the host pays for it per container
        shims = []
        for pid in filter(None, roots):
            try:
                parent = psutil.Process(pid).parent()
                shims.append(parent.pid if parent and parent.name().startswith("containerd-shim") else pid)
            except psutil.Error:
                pass
        return shims
    return [private["pid"]] if private.get("pid") else []


def memory(pids: list[int]) -> tuple[float, float, int]:
    """(RSS MB, PSS MB, process count) over the trees rooted at ``pids``."""
    rss = pss = 0
    count = 0
    for root in pids:
        try:
            tree = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            continue
        for proc in tree:
            try:
                full = proc.memory_full_info()
            except psutil.Error:
                continue
            rss += full.rss
            pss += getattr(full, "pss", full.rss)
            count += 1
    return rss / 2**20, pss / 2**20, count


def docker_stats(name: str) -> str:
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}", name],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip().split(" / ")[0] if out.returncode == 0 else "?"


def bench(name: str, args) -> dict:
    cls = get_provider(name)
    if args.build_images and name != "process":
        cls.build_image(desktop=args.desktop, log=lambda line: print(line, file=sys.stderr))
    cls.check_available()
    run_id = f"bench-{os.getpid()}-{name}"
    provider = cls(run_id, ProviderOptions(boot_timeout_s=args.boot_timeout, desktop=args.desktop,
                                           screen_width=1280, screen_height=720))
    result: dict = {"provider": name}
    try:
        boots = []
        for _ in range(args.boots):
            started = time.monotonic()
            info = provider.start("vm0")
            boots.append(time.monotonic() - started)
            provider.stop(info)
        result["boot"] = boots

        info = provider.start("vm0")
        try:
            time.sleep(max(args.gap, 1.0))  # let a provider finish what it does after a boot
            rss, pss, count = memory(vm_roots(name, provider, info))
            result["memory"] = {"rss_mb": round(rss, 1), "pss_mb": round(pss, 1),
                                "processes": count}
            if name == "docker":
                result["memory"]["docker_stats_active"] = docker_stats(info.private["name"])
            for label, gap in (("reset", args.gap), ("reset_back_to_back", 0.0)):
                times = []
                for i in range(args.resets):
                    client = GuestClient(info.address)
                    client.execute(f"echo {i} > ~/work.txt; ls /tmp > /dev/null", shell=True)
                    time.sleep(gap)
                    started = time.monotonic()
                    info = provider.reset(info)
                    times.append(time.monotonic() - started)
                result[label] = times
        finally:
            provider.stop(info)
    finally:
        cls.sweep(run_id)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="process,docker,qemu")
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--resets", type=int, default=20)
    parser.add_argument("--gap", type=float, default=1.0,
                        help="seconds the VM is used between resets in the first series")
    parser.add_argument("--boot-timeout", type=float, default=300.0)
    parser.add_argument("--start-dockerd", action="store_true",
                        help="start dockerd with scripts/dockerd.sh when none answers (stopped at the end)")
    parser.add_argument("--build-images", action="store_true",
                        help="build (or find cached) each provider's guest image first")
    parser.add_argument("--desktop", action="store_true",
                        help="VMs with a 1280x720 desktop (the osworld mode's; docker and qemu "
                             "boot their desktop image)")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    args = parser.parse_args(argv)

    started_dockerd = False
    if args.start_dockerd and "docker" in args.providers.split(","):
        out = subprocess.run([str(ROOT / "scripts" / "dockerd.sh"), "start"], capture_output=True,
                             text=True, timeout=120)
        started_dockerd = out.stdout.startswith("started")
    results = []
    try:
        for name in args.providers.split(","):
            try:
                results.append(bench(name, args))
            except (ProviderUnavailable, ConfigError) as exc:
                results.append({"provider": name, "unavailable": str(exc)})
    finally:
        if started_dockerd:
            subprocess.run([str(ROOT / "scripts" / "dockerd.sh"), "stop"], capture_output=True,
                           timeout=60)

    print(f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
          f"{args.resets} resets per series, {args.gap:g} s of use between resets in the first")
    for r in results:
        print(f"\n{r['provider']}")
        if "unavailable" in r:
            print(f"  unavailable: {r['unavailable']}")
            continue
        print(f"  boot                {describe(r['boot'])}")
        print(f"  reset (after use)   {describe(r['reset'])}")
        print(f"  reset back to back  {describe(r['reset_back_to_back'])}")
        mem = r["memory"]
        line = (f"  memory per VM       RSS {mem['rss_mb']:.1f} MB, PSS {mem['pss_mb']:.1f} MB "
                f"over {mem['processes']} processes")
        if "docker_stats_active" in mem:
            line += (f" (active + spare container); docker stats of the active one: "
                     f"{mem['docker_stats_active']}")
        print(line)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
