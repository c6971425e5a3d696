"""The commands beside ``run`` that prepare or clean a machine: ``image build`` (the guest
images docker and qemu boot), ``vms sweep`` (the VMs killed runs left behind) and
``osworld-cache`` (OSWorld's downloads for a machine without internet); and how every command
ends (:func:`end_command`). The group in cli.py adds them beside ``run``.
"""

from __future__ import annotations

import sys

import click

from .cli_options import TypedFlagsCommand, given_as
from .errors import ConfigError, ProviderUnavailable, VMError
from .exit_codes import EXIT_ABORTED, EXIT_USAGE
from .logs import say


def end_command(code: int) -> None:
    """End the command with ``code``; at once when its Ray driver lost the head node (the
    interpreter's end waits on it: ``ray_head.exit_if_stranded``)."""
    ray_side = sys.modules.get("parallel_rollout.backends.ray_head")  # loaded by --backend ray only
    if ray_side is not None:
        ray_side.exit_if_stranded(code)
    sys.exit(code)


@click.group()
def image() -> None:
    """Build the guest images that VM providers boot (docker, qemu)."""


@image.command("build", cls=TypedFlagsCommand)
@click.option("--provider", "--provider-name", "provider_name", required=True, help="Whose image: docker or qemu.")
@click.option("--force", is_flag=True, help="Rebuild even when a cached image exists.")
@click.option("--desktop", is_flag=True,
              help="The image of desktop modes (osworld): adds Xvfb, openbox, xterm, mousepad, "
                   "pcmanfm, xdotool, wmctrl, ffmpeg, AT-SPI, LibreOffice (Writer, Calc, Impress), "
                   "Chromium, GIMP, VLC, Thunderbird, ImageMagick and the programs OSWorld's tasks run "
                   "(2.03 GB as a docker image).")
@click.pass_context
def image_build(ctx: click.Context, provider_name: str, force: bool, desktop: bool) -> None:
    """Build the guest image (Debian from Debian's packages, python3, the guest agent) and cache it."""
    from .pool.providers import get_provider

    provider = get_provider(provider_name, given_as(ctx, "provider_name"))  # unknown: exit 2, as run's
    try:
        where = provider.build_image(
            force=force, desktop=desktop, log=lambda line: say(line, err=True))
    except ProviderUnavailable as exc:  # no daemon, debootstrap, root…: said as a run says it (2)
        say(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except VMError as exc:
        raise click.ClickException(f"image build failed: {exc}") from None
    say(where)


@click.group()
def vms() -> None:
    """Inspect and clean up VMs."""


@vms.command(cls=TypedFlagsCommand)
@click.option("--provider-name", "--provider", default="process", show_default=True,
              help="Which provider's VMs to sweep.")
@click.option("--run-id", help="Only the VMs of this run (default: every run's); a live run's VMs are never removed.")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this host; ray: every node of the Ray cluster.")
@click.option("--ray-address", help="--backend ray: 'auto' or HOST:PORT (default: a local Ray instance).")
@click.pass_context
def sweep(ctx: click.Context, provider_name: str, run_id: str | None, backend: str, ray_address: str | None) -> None:
    """Remove VMs (sandboxes, containers…) left behind by runs that were killed; the VMs of a
    run that is still going stay."""
    from .backends import sweep as sweep_vms

    if ray_address is not None and backend != "ray":
        raise ConfigError("--ray-address needs --backend ray")
    try:
        removed = sweep_vms(provider_name, run_id, backend, ray_address, said=given_as(ctx, "provider_name"))
    except ProviderUnavailable as exc:
        # no docker CLI or daemon: said as a run says it (2), not a traceback
        say(f"Error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except VMError as exc:  # a docker call that failed or hung, a Ray node or head: nothing swept for certain
        say(f"Error: sweep failed: {exc}", err=True)
        end_command(EXIT_ABORTED)
    say(f"removed {len(removed)} {provider_name} VM(s)" + (": " + ", ".join(removed) if removed else ""))


@click.command("osworld-cache", add_help_option=False,
              context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def osworld_cache(args: tuple[str, ...]) -> None:
    """Fill or inspect OSWorld's download cache for a machine without internet: where URL,
    put URL FILE, missing DATA [--index I] [--domain D] (osworld-cache --help)."""
    from .envs.osworld.cache_tool import COMMAND, main as cache_main
    from .provenance import program

    sys.exit(cache_main(list(args), prog=f"{program()} {COMMAND}"))
