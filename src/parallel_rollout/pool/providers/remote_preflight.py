"""``--dry-run``'s look at the ``remote`` provider's machines, which starts and resets nothing:
what a first boot of the run would stop at (a key the agent refuses, a desktop of another size
or none, an agent ``--verify-reset`` cannot probe), asked of each machine's agent as it runs now,
with the same checks the provider's ``start`` makes (``remote.py``)."""

from __future__ import annotations

from ...errors import ConfigError, GuestUnreachable, VMError, VMSettingsMismatch
from ...guest.client import keyed_address
from ...vm_address import normalize_address
from . import verify_guest
from .boot_checks import READY_ROUTE, check_screen
from .remote import NO_RESET, key_refused, read_key

#: how long the dry run waits for each machine's agent to answer
PREFLIGHT_TIMEOUT_S = 5.0


def check_machines(addresses: tuple[str, ...], key_file: str | None, reset_command: str | None,
                   screen: tuple[int, int] | None = None, verify_reset: str | None = None) -> str:
    """Each agent answers GET /platform with the run's key (``--vm-key-file``) within
    PREFLIGHT_TIMEOUT_S, all asked at once; then, of one that answers, what its first boot
    checks: its desktop against ``screen`` (width, height; None: the mode runs none), and with
    ``verify_reset`` fast or full that it has the probe's ``/run_python``. ConfigError naming
    every agent that refuses the key or fails those and, with ``--reset-command none``
    (nothing would bring it up), every one that does not answer: such a run boots each VM
    until the replacement budget is spent, a minute a boot (--boot-timeout-s), then stops.
    With a reset command, a machine that does not answer yet may be one it starts."""
    from concurrent.futures import ThreadPoolExecutor

    from ...guest.client import GuestClient

    key, plain = read_key(key_file), [normalize_address(a) for a in addresses]
    resets = reset_command is not None and reset_command.strip().lower() != NO_RESET
    now = " (as the machine runs now: a dry run runs no --reset-command)" if resets else ""

    def ask(address: str) -> str | None:
        keyed = keyed_address(address, key) if key else address
        try:
            answer = GuestClient(keyed).request("GET", READY_ROUTE, timeout=PREFLIGHT_TIMEOUT_S, check=False)
            if answer.status == 401:
                return key_refused(address, key_file)
            if answer.status != 200 or not answer.body.strip():
                return f"{address} answered GET {READY_ROUTE} with HTTP {answer.status}, not a guest agent's answer"
            if screen is not None:
                check_screen(keyed, address, screen)
            if (verify_reset or "off") != "off":  # an empty body: ours answers 400, one without the route 404
                probe = GuestClient(keyed).request("POST", "/run_python", json={}, timeout=PREFLIGHT_TIMEOUT_S,
                                                   check=False)
                if probe.status in verify_guest.NO_ROUTE:
                    return f"{address}: {verify_guest.no_probe_route(verify_reset, f'HTTP {probe.status}')}{now}"
        except GuestUnreachable as exc:
            return None if resets else f"{exc} (with --reset-command none nothing starts it: start its agent first)"
        except VMSettingsMismatch as exc:
            return f"{exc}{now}"
        except VMError:  # a desktop that cannot tell its size now: the boot's to find out
            return None
        return None

    with ThreadPoolExecutor(max_workers=min(16, len(plain))) as pool:
        problems = [problem for problem in pool.map(ask, plain) if problem]
    if problems:
        raise ConfigError("the remote machines: " + "; ".join(problems))
    return f"the {len(plain)} remote machine(s) " + ("answer or are left to --reset-command" if resets else "answer")
