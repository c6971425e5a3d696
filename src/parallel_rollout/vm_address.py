"""A remote machine's settings as the config's checks and the remote provider both read them:
``--vm-address`` (``normalize_address``: HOST, HOST:PORT or http://HOST:PORT) and the
``{name}`` placeholders of its ``--reset-command`` (``check_placeholders``: a typo of one is
refused, other braces are left as they are)."""

from __future__ import annotations

import difflib
import re

from .errors import ConfigError

#: OSWorld's guest server listens on Flask's default port: a --vm-address without one
DEFAULT_PORT = 5000
#: what a remote --reset-command's ``{name}`` is replaced with (pool/providers/remote.py)
RESET_PLACEHOLDERS = ("address", "host", "port", "vm_id", "run_id")

#: the placeholders, as a message lists them
PLACEHOLDERS_SAID = ", ".join(f"{{{name}}}" for name in RESET_PLACEHOLDERS)


def braced_names(command: str) -> list[str]:
    """Each ``{name}`` of ``command`` once, in order (not the shell's ``${name}``)."""
    return list(dict.fromkeys(re.findall(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}", command)))


def check_placeholders(command: str) -> None:
    """ConfigError naming each ``{name}`` of ``command`` that reads as a typo of a placeholder
    (another case, or close to one): only the known names are replaced."""
    typos = []
    for name in braced_names(command):
        close = difflib.get_close_matches(name.lower(), RESET_PLACEHOLDERS, n=1, cutoff=0.7)
        if name not in RESET_PLACEHOLDERS and close:
            typos.append(f"{{{name}}} (did you mean {{{close[0]}}}?)")
    if typos:
        raise ConfigError(f"--reset-command: unknown placeholder {', '.join(typos)}; the placeholders are "
                          f"{PLACEHOLDERS_SAID} (other braces are left as they are)")


def left_as_typed(command: str) -> str:
    """What a failed reset command's error adds when ``command`` holds a ``{name}`` that is no
    placeholder and too far from one to be refused as a typo (``{hostname}``): it ran as those
    characters, which the command's own complaint may not say; "" when it holds none."""
    names = [f"{{{name}}}" for name in braced_names(command) if name not in RESET_PLACEHOLDERS]
    if not names:
        return ""
    return (f" ({', '.join(names)} {'is no placeholder' if len(names) == 1 else 'are no placeholders'} and ran "
            f"as typed; the placeholders are {PLACEHOLDERS_SAID})")


def normalize_address(raw: str) -> str:
    """``http://host:port`` from ``host``, ``host:port`` or ``http://host[:port]``;
    ConfigError for anything else."""
    text = raw.strip().rstrip("/")
    if text.startswith("https://"):
        raise ConfigError(f"--vm-address {raw!r}: the guest agent speaks plain http")
    text = text.removeprefix("http://")
    if not text or "/" in text or "@" in text:
        raise ConfigError(f"--vm-address {raw!r} must be HOST, HOST:PORT or http://HOST:PORT")
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else (None if not rest else "bad")
        host = f"[{host}]"
    elif text.count(":") == 1:
        host, port = text.split(":")
    elif ":" in text:  # a bare IPv6 address
        host, port = f"[{text}]", None
    else:
        host, port = text, None
    port = str(DEFAULT_PORT) if port is None else port
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--vm-address {raw!r} must be HOST, HOST:PORT or http://HOST:PORT "
                          "with a port from 1 to 65535")
    return f"http://{host}:{int(port)}"


def check_distinct(raw: list[str] | tuple[str, ...]) -> list[str]:
    """The normalized addresses of ``raw`` (``normalize_address``); ConfigError naming any two
    that are one machine (``10.0.0.5`` and ``10.0.0.5:5000``): its VMs would reset each other."""
    addresses = [normalize_address(address) for address in raw]
    doubled = sorted({address for address in addresses if addresses.count(address) > 1})
    if doubled:
        raise ConfigError(f"--vm-address names {', '.join(doubled)} more than once; "
                          "two VMs on one machine would reset each other")
    return addresses
