"""The VMs and workers a run starts, as its samples need them, and the VM settings it was
given that it has no use for. ``Runner.prepare`` sizes the engine by the run's samples
(``sized_for_samples``, again by those a resume has left once its folder opens: each cut
said once) and warns of the ignored settings; ``config.json`` keeps what was asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .setting_names import as_given, setting_name


#: the VMs' settings a run whose VMs do not use them ignores, with a warning (the rest are refused)
_VM_TUNABLES = frozenset({"spare_vms", "verify_reset", "boot_timeout_s", "max_vm_replacements", "headless"})


def counted(n: int, noun: str, verb: str = "") -> str:
    """``n`` with ``noun`` and ``verb`` agreeing: '1 sample needs', '2 samples need', '1 VM is',
    '3 VMs are'; no noun: the count and its verb ('1 starts')."""
    if noun:
        noun = f" {noun}" if n == 1 else f" {noun}s"
    if verb == "be":
        verb = "is" if n == 1 else "are"
    elif verb and n == 1:
        verb += "s"
    return f"{n}{noun}" + (f" {verb}" if verb else "")


def ignored_vm_settings(cfg: Any, provider_cls: Any) -> list[tuple[str, str, str]]:
    """(the setting as said, why the run ignores it, its name) of each VM setting given to a
    run that has no use for it: any in a mode that runs in no VM (``provider_cls`` None),
    --headless where the provider's VMs open no window (process, docker, qemu, remote)."""
    given = sorted(_VM_TUNABLES & cfg.explicit)
    if provider_cls is not None:
        given = [] if provider_cls.opens_windows or "headless" not in given else ["headless"]
    why = (f"the {provider_cls.name} provider's VMs open no window" if provider_cls is not None
           else f"the {cfg.mode} mode runs in no VM")
    return [(setting_name(cfg, name), why, name) for name in given]


def sized_for_samples(cfg: Any, samples: int, provider_cls: Any, say: Callable[..., None],
                      unasked: Callable[..., None] | None = None) -> Any:
    """``cfg`` for a run of ``samples``: no more VMs than can be used at once, and no more
    workers than the samples keep busy, ceil(samples / K) (idle loops started for nothing: 300
    workers for one sample took 8 s and a process each), each cut ``say``-ed (config.json
    keeps the ask). Given ``unasked`` (the runner's: a debug log), the cut of a setting the run
    was never given (its default, not in ``cfg.explicit``) is said by it instead: the samples
    decide the pool, and '--num-rollouts 5 … so 1 start' of a flag never typed, warned at each
    small run or resume, was nothing to act on."""
    if samples < 1:
        return cfg

    def tell(name: str) -> Callable[..., None]:
        return say if unasked is None or name in cfg.explicit else unasked

    asked = cfg
    if provider_cls is not None:
        cfg = _vms_for_samples(cfg, samples, provider_cls, tell)
    busy = -(-samples // cfg.envs_per_worker)
    if cfg.num_rollouts > busy and (provider_cls is None or cfg.use_vm_pool):
        tell("num_rollouts")("%s: %s at most %s of %s busy, so %s%s",
                             as_given(cfg, "num_rollouts", with_value=True), counted(samples, "sample", "keep"),
                             counted(busy, "worker"), counted(cfg.envs_per_worker, "env loop"), counted(busy, "", "start"),
                             " on each node" if cfg.backend == "ray" else "")
        cfg = dataclasses.replace(cfg, num_rollouts=busy)
    return _limit_of_fewer_workers(asked, cfg, tell)


def _limit_of_fewer_workers(asked: Any, sized: Any, tell: Callable[[str], Callable[..., None]]) -> Any:
    """``sized`` (the workers cut to the samples) with the --max-concurrent-rollouts asked for:
    one above the env loops asked for is said cut to them, as every run's is, in the counts as
    given (the engine would say it of the loops left, '--num-rollouts 6', a count never typed,
    or, with the pool, not at all); one the loops left all meet is no limit of theirs, dropped."""
    limit = asked.max_concurrent_rollouts
    # on ray the limit is the cluster's and the loops a node's: it stays, the engine says it
    if limit is None or sized.num_rollouts == asked.num_rollouts or asked.backend == "ray":
        return sized
    loops, left = asked.num_rollouts * asked.envs_per_worker, sized.num_rollouts * sized.envs_per_worker
    if limit > loops:
        tell("max_concurrent_rollouts")(
            "%s is more than the %d env loops asked for (%s × %s): cut to them, and to the %d the samples keep busy",
            as_given(asked, "max_concurrent_rollouts", with_value=True), loops,
            as_given(asked, "num_rollouts", with_value=True), as_given(asked, "envs_per_worker", with_value=True), left)
    return dataclasses.replace(sized, max_concurrent_rollouts=None) if limit >= left else sized


def _vms_for_samples(cfg: Any, samples: int, provider_cls: Any,
                     tell: Callable[[str], Callable[..., None]]) -> Any:
    """No more VMs than ``samples`` can use at once. On ray the bound is a node's: each
    node's pool serves its own node's N workers; one pool leased from every node (remote VMs)
    is bounded by the samples and --max-concurrent-rollouts only, the cluster's loops being
    unknown until it is joined."""
    per_node = cfg.backend == "ray" and not getattr(provider_cls, "reachable_from_any_node", False)
    if cfg.backend == "ray" and not per_node:  # one pool, leased from every node: their loops are unknown yet
        limit = cfg.max_concurrent_rollouts
        usable, why = min(limit or samples, samples), f", --max-concurrent-rollouts {limit}" if limit else ""
    else:
        usable, why = min(cfg.concurrency, samples), f", {counted(cfg.concurrency, 'env loop')}"
    a_node, each_node = (" on a node", " on each node") if per_node else ("", "")
    if cfg.use_vm_pool and cfg.num_vms > usable:
        tell("num_vms")("%s: at most %s at once%s (%s%s), so %s booted%s",
                        as_given(cfg, "num_vms", with_value=True), counted(usable, "rollout", "run"), a_node,
                        counted(samples, "sample"), why, counted(usable, "VM", "be"), each_node)
        return dataclasses.replace(cfg, num_vms=usable)
    if not cfg.use_vm_pool and cfg.num_rollouts > samples:
        tell("num_rollouts")("%s without --use-vm-pool boots a VM per worker: %s %s, so %s%s",
                             as_given(cfg, "num_rollouts", with_value=True), counted(samples, "sample", "need"),
                             counted(samples, "worker"), counted(samples, "", "start"),
                             " on each node" if cfg.backend == "ray" else "")
        return dataclasses.replace(cfg, num_rollouts=samples)
    return cfg
