"""What a boot of a user's machine (the remote provider's addresses, the vmware and virtualbox
providers' VM files) checks against the run's settings once its agent answers, and how a
mismatch is told: at the machine's first boot in the run it is the run's settings
(VMSettingsMismatch: the run stops at once, exit 2, its attempts left to a resume), since no
reset or other boot changes it; at a later boot (it matched before) the machine changed, a
VMError as any failed boot. ``--dry-run`` asks the remote machines the same (``remote_preflight``)."""

from __future__ import annotations

from contextlib import contextmanager

from ...config import RESULT_FIELDS
from ...errors import GuestUnreachable, VMError, VMSettingsMismatch
from . import verify_guest
from .base import ProviderOptions, VMInfo

#: the route readiness and health ask: OSWorld's server and ours both have it
READY_ROUTE = "/platform"
#: what our guest agent started without ``--desktop`` answers a desktop route
NO_DESKTOP = 503


@contextmanager
def first_boot(booted: set[str], slot: str):
    """Around a boot of the machine ``slot`` (an address, a VM file): a VMSettingsMismatch
    raised inside stops the run only at the slot's first boot in the run; at a later one (it
    matched before) the machine changed since, a VMError as any failed boot. A boot that
    passes adds ``slot`` to ``booted``."""
    try:
        yield
    except VMSettingsMismatch as exc:
        if slot in booted:
            raise VMError(f"{exc} (it booted earlier in this run: the machine changed since)") from None
        raise
    booted.add(slot)


@contextmanager
def no_agent_is_settings(where: str, options: ProviderOptions, name: str):
    """Around the wait for an agent at ``where`` (``VM vm-0: http://…``): a server that answered
    GET /platform without the route for the whole wait is no guest agent, VMSettingsMismatch
    naming setting ``name`` (``vm_address``), what to fix, as the user gave it (``options.said``);
    another GuestUnreachable passes as it is."""
    try:
        yield
    except GuestUnreachable as exc:
        if getattr(exc, "answered", None) not in verify_guest.NO_ROUTE:
            raise
        raise VMSettingsMismatch(f"{where} answered GET {READY_ROUTE} with HTTP {exc.answered} for "
                                 f"{options.boot_timeout_s:g}s ({options.said('boot_timeout_s')}): no guest agent "
                                 f"listens there (OSWorld's server and this project's answer it); fix "
                                 f"{options.said(name)} {resume_note(name, options.said(name))}") from None


def resume_note(name: str, said: str) -> str:
    """Whether a resume of the stopped run may give setting ``name``, said by the message as
    ``said`` (``ProviderOptions.said``), another value: not one that changes results
    (``config.RESULT_FIELDS``), such as path_to_vm; its flag is named, a file's or a variable's not."""
    if name in RESULT_FIELDS:
        kept = f"the run's {said}" if said.startswith("--") else "the value the run started with"
        return f"(in a new run: a resume keeps {kept})"
    return "(a resume may give another)"


def check_booted(options: ProviderOptions, view: verify_guest.GuestView, slot: str, info: VMInfo,
                 machine: str) -> None:
    """What a boot of a user's machine checks once its agent answers: with a desktop, its
    screen against ``--screen-width``/``--screen-height`` (``check_screen``), then the reset
    check's baseline of ``slot`` (``verify_guest.baseline_machine``). ``machine`` names it."""
    if options.desktop:
        check_screen(info.address, machine, (options.screen_width, options.screen_height))
    verify_guest.baseline_machine(view, slot, info)


def check_screen(address: str, machine: str, want: tuple[int, int]) -> None:
    """That the agent at ``address`` (keyed) has a desktop of ``want`` (width, height), what a
    first boot of a desktop run checks: VMSettingsMismatch when it has none (503) or one of
    another size, no reset or other boot changes that; VMError when it cannot tell.
    ``machine`` names it in the messages (``VM vm-0 (http://…)``)."""
    from ...guest.client import GuestClient

    client = GuestClient(address, timeout_s=10.0)
    try:
        answer = client.request("POST", "/screen_size", timeout=10.0, check=False)
        if answer.status == NO_DESKTOP:  # our agent started without --desktop: no reset gives it one
            raise VMSettingsMismatch(f"{machine} has no desktop: its agent answered POST /screen_size with "
                                     f"{NO_DESKTOP} ({answer.text[:200]}); start it with --desktop "
                                     f"{want[0]}x{want[1]}, the run's screen")
        client.check_answer("POST", "/screen_size", answer)  # another failure, as for any route
        size = answer.json()
        have = (int(size["width"]), int(size["height"]))
    except (GuestUnreachable, VMError, ValueError, KeyError, TypeError) as exc:
        raise VMError(f"{machine} has no usable desktop: POST /screen_size failed: {exc}") from None
    if tuple(have) != want:  # no reset or other boot changes the machine's screen
        raise VMSettingsMismatch(f"{machine} has a {have[0]}x{have[1]} screen; the run asks for {want[0]}x{want[1]}: "
                                 f"set the machine's screen to {want[0]}x{want[1]}, or start a new run with "
                                 f"--screen-width {have[0]} --screen-height {have[1]} (a resume keeps the run's size)")
