"""Staleness by policy version: how far behind the policy that sampled a group's tokens is.

``async_generation_ratio`` (ROLL's meaning) bounds how many steps ahead groups start, judged
by the ``step`` the trainer passes; a long episode can still span several weight updates.
``max_version_lag=k`` bounds what actually sampled the tokens (prime-rl's bound by the oldest
version in a rollout): a group any of whose tokens were sampled by a version older than
``current - k`` is dropped, or, with ``stale_versions="keep"``, kept and marked
(``Trajectory.version_stale``) for the trainer to weigh or mask.

The policy gate knows the oldest version among the tokens each sample keeps (the agent names
its sample on "begin" and the oldest version it keeps on "end": a whole reply's, or a partial
reply's it will continue; nothing for a turn aborted to start over;
``PolicyGate.oldest_version``), so a group is judged the same way running or complete, without
reading its trajectory files: a running group already known to hold such tokens (a partial
reply in flight included) is dropped when the trainer resumes with a new version, a complete
one when it completes or when ``get_batch`` takes it.
"""

from __future__ import annotations

from typing import Iterable

from ..errors import ConfigError
from .config import check_count

#: what a group behind the lag becomes
STALE_VERSIONS = ("drop", "keep")


class VersionLag:
    """``max_version_lag`` and ``stale_versions`` of a scheduler, judged through its gate."""

    def __init__(self, gate, max_version_lag: int | None, stale_versions: str = "drop") -> None:
        # the options are checked (check_lag_options) before any engine starts: the scheduler's first step
        self.gate = gate
        self.max_lag = max_version_lag
        self.mode = stale_versions

    def oldest(self, keys: Iterable[str]) -> int | None:
        """The oldest policy version any request of these samples got; None when none began."""
        versions = [v for v in (self.gate.oldest_version(key) for key in keys) if v is not None]
        return min(versions) if versions else None

    def stale(self, keys: Iterable[str], current: int | None = None) -> bool:
        """Whether a sample of ``keys`` holds tokens older than ``current - max_version_lag``
        (``current``: the gate's version unless told)."""
        if self.max_lag is None:
            return False
        oldest = self.oldest(keys)
        current = self.gate.version if current is None else current
        return oldest is not None and oldest < current - self.max_lag

    def drops(self, keys: Iterable[str], current: int | None = None) -> bool:
        """Whether a group of ``keys`` is to be dropped (stale, and ``stale_versions="drop"``)."""
        return self.mode == "drop" and self.stale(keys, current)

    def forget(self, keys: Iterable[str]) -> None:
        """The samples are settled: the gate forgets their versions."""
        for key in keys:
            self.gate.forget(key)


def check_lag_options(max_version_lag: int | None, stale_versions: str) -> int | None:
    """``max_version_lag`` as an int; ConfigError naming the argument unless it is None or a
    whole number >= 0 and ``stale_versions`` one of ``STALE_VERSIONS``."""
    max_version_lag = check_count("max_version_lag", max_version_lag, 0, optional=True)
    if stale_versions not in STALE_VERSIONS:
        raise ConfigError(f"stale_versions must be 'drop' or 'keep', got {stale_versions!r}")
    return max_version_lag
