"""The commands that read runs already written: ``report``, ``compare``, ``runs list`` and
``runs export-osworld``.

Each takes a run's folder, or its run id under ``--output-dir``, and hands off to
``report/`` (``run_data.resolve_run`` finds the folder); none starts a VM or a worker. The
group in cli.py adds them beside ``run``, ``image`` and ``vms``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from .cli_aliases import OSWORLD_ALIASES
from .cli_options import TypedFlagsCommand, refuse_stdout
from .config import RunConfig
from .errors import ConfigError
from .logs import say
from .setting_names import TYPED

#: where a run id given instead of a folder is looked up: run's --output-dir default
OUTPUT_DIR = RunConfig().output_dir
#: OSWorld's run.py name of the folder run writes its runs in, run's --output-dir (cli_aliases)
RESULT_DIR = next(flag for flag, ours in OSWORLD_ALIASES.items() if ours == "--output-dir")


class RunsCommand(TypedFlagsCommand):
    """A command that reads runs: OSWorld's ``--result_dir``, which ``run`` reads as
    ``--output-dir``, is that here too, and errors say it as typed."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        spelled = [arg for arg in args[:end] if arg.partition("=")[0] == RESULT_DIR]
        if spelled and self.name == "export-osworld":
            raise click.UsageError(f"{RESULT_DIR} is OSWorld's run.py name of run's --output-dir; here RESULT_DIR, the "
                                   "second argument, is OSWorld's result folder the export writes, and --output-dir "
                                   "the folder RUN is looked up in when it is a run id", ctx)
        rest = super().parse_args(ctx, [f"--output-dir{arg[len(RESULT_DIR):]}" if arg in spelled else arg
                                        for arg in args[:end]] + args[end:])
        if spelled:
            ctx.meta[TYPED]["--output-dir"] = RESULT_DIR
        return rest


@click.command("report", cls=RunsCommand)
@click.argument("run_dir")
@click.option("--output", "-o", type=click.Path(dir_okay=False), callback=refuse_stdout,
              help="Where to write the page, a file ('-', stdout, is refused; default: RUN_DIR/report.html; "
                   "screenshots are linked relative to the run folder).")
@click.option("--output-dir", default=OUTPUT_DIR, show_default=True,
              help="Where a run id given instead of a folder is looked up.")
def report_cmd(run_dir: str, output: str | None, output_dir: str) -> None:
    """Write the self-contained HTML report of a run (its folder, or its run id under
    --output-dir) and print its path."""
    from .report.html import write_report
    from .report.run_data import resolve_run

    say(write_report(resolve_run(run_dir, output_dir), output))


@click.command("compare", cls=RunsCommand)
@click.argument("run_a")
@click.argument("run_b")
@click.option("--output-dir", default=OUTPUT_DIR, show_default=True,
              help="Where run ids given instead of folders are looked up.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), callback=refuse_stdout,
              help="Where to write the page, a file ('-', stdout, is refused; default: RUN_B/compare-<A>.html; "
                   "the text goes beside it as .txt).")
@click.option("--check", is_flag=True, help="Exit 4 when B is significantly worse than A (McNemar exact, p < 0.05; with several "
              "samples per task, Wilcoxon signed-rank over tasks); 5 when there is no verdict (no shared sample, "
              "an unfinished or unreadable A, no such run A: a missed night).")
def compare_cmd(run_a: str, run_b: str, output_dir: str, html_path: str | None, check: bool) -> None:
    """Compare run B with the baseline run A (folders or run ids) over their shared samples."""
    from .exit_codes import EXIT_NO_VERDICT, EXIT_REGRESSION
    from .report.compare import compare_runs, format_comparison
    from .report.compare_html import write_compared
    from .report.files import CannotWrite
    from .report.run_data import NotARunFolder, RunData, resolve_run

    # B first: a mistyped B is a usage error (exit 2), not hidden behind a missing A's "no verdict"
    candidate = resolve_run(run_b, output_dir)
    if _same_run(run_a, candidate, output_dir):  # a slip (a date or run id typed twice): its verdict is no verdict
        RunData.load(candidate, with_events=False)  # a folder that is no run, a corrupted line: said first
        raise ConfigError(f"compare {run_a} {run_b} compares the run {candidate} with itself: give the "
                          "baseline run as A (as run --compare-to refuses its own run id)")
    try:
        baseline = RunData.load(resolve_run(run_a, output_dir), with_events=False)
    except ConfigError as exc:
        if not check:
            raise
        # as `run --compare-to` does: a baseline that is not there (a missed night), or that
        # cannot be read (a corrupted line), is no verdict, not a usage error
        say(f"no verdict: {'no baseline' if isinstance(exc, NotARunFolder) else 'cannot read the baseline'}: {exc}",
            err=True)
        sys.exit(EXIT_NO_VERDICT)
    compared = RunData.load(candidate, with_events=False)
    comparison = compare_runs(baseline, compared, b_live=True)
    text = format_comparison(comparison)
    say(text)
    try:
        page = write_compared(comparison, text, baseline, compared, html_path)
    except CannotWrite as exc:
        if not check:
            raise
        # the verdict is what --check is for: a full disk does not hide it behind exit 2, as
        # it does not for run --compare-to
        say(f"{exc}; the verdict stands", err=True)
    else:
        say(f"written: {page} and {page.with_suffix('.txt')}")
    if check and comparison.cannot_judge:
        say(f"no verdict: {comparison.cannot_judge}", err=True)
        sys.exit(EXIT_NO_VERDICT)
    if check and comparison.regressed:
        sys.exit(EXIT_REGRESSION)


def _same_run(run_a: str, candidate: Path, output_dir: str) -> bool:
    """Whether ``run_a`` names the run folder ``candidate`` (by another spelling too: its
    run id and its path); False when it names none."""
    from .report.run_data import resolve_run

    try:
        return resolve_run(run_a, output_dir).resolve() == candidate.resolve()
    except ConfigError:
        return False


class RunsGroup(click.Group):
    """``runs``: a word that is no command of it but one of the program's own (``runs
    report``, ``runs compare``, beside README's ``runs list``) is said as that command, not
    as click's bare "No such command 'report'"."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, Any, list[str]]:
        top = getattr(ctx.parent.command, "commands", {}) if ctx.parent is not None else {}
        if args and args[0] not in self.commands and args[0] in top and args[0] != ctx.info_name:
            from .provenance import program

            raise click.UsageError(f"no command {args[0]!r} in runs (it has {', '.join(sorted(self.commands))}): "
                                   f"{args[0]} is a command of its own: {program()} {shlex.join(args)}", ctx)
        return super().resolve_command(ctx, args)


@click.group(cls=RunsGroup)
def runs() -> None:
    """The runs of an output folder."""


@runs.command("list", cls=RunsCommand, context_settings={"allow_extra_args": True})
@click.option("--output-dir", default=OUTPUT_DIR, show_default=True, help="The folder that holds the runs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run instead of a table.")
@click.pass_context
def runs_list(ctx: click.Context, output_dir: str, as_json: bool) -> None:
    """Every run with its date, mode, samples, success rate (of the graded samples) and status (complete,
    ungraded, running, partial, interrupted, rl: an RL scheduler's folder, which has no total; unreadable)."""
    import json

    from .report.runs import format_runs, list_runs

    if ctx.args:  # runs list results, as report and compare take their runs: click said 'unexpected extra argument'
        raise click.UsageError(f"runs list takes the folder of runs as --output-dir: --output-dir {ctx.args[0]}"
                               + (f" (and no other argument: {' '.join(ctx.args[1:])})" if ctx.args[1:] else ""), ctx)

    lines = list_runs(output_dir)
    if as_json:  # no runs: no line
        for line in lines:
            say(json.dumps(line.to_json()), answer=True)
    elif not lines:  # a table header alone said nothing of why
        say(f"no runs in {output_dir} (none of its folders holds a config.json or results.jsonl)", err=True)
    else:
        say(format_runs(lines), answer=True)


@runs.command("export-osworld", cls=RunsCommand)
@click.argument("run")
@click.argument("result_dir", type=click.Path(file_okay=False))
@click.option("--output-dir", default=OUTPUT_DIR, show_default=True,
              help="Where RUN is looked up when it is a run id, not a folder.")
@click.option("--sample", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which sample of each task (OSWorld has one folder per example; with --group-size k, "
                   "export each sample to a result folder of its own).")
@click.option("--model", help="The <model> folder (default: the run's --model, else its --agent); a '/' in it "
              "nests folders, as OSWorld's run.py does (Qwen/Qwen2.5-VL-7B-Instruct).")
@click.option("--overwrite", is_flag=True, help="Replace example folders already in RESULT_DIR.")
def runs_export_osworld(run: str, result_dir: str, output_dir: str, sample: int, model: str | None,
                        overwrite: bool) -> None:
    """Put an osworld run's final trajectories in OSWorld's result layout, which its
    show_result.py reads: RESULT_DIR/<action_space>/<observation_type>/<model>/<domain>/<id>/."""
    from .report.osworld_export import export_osworld
    from .report.run_data import resolve_run

    done = export_osworld(resolve_run(run, output_dir), result_dir, sample=sample, model=model,
                          overwrite=overwrite)
    domains = (f"domains from {done.index}" if done.index else "domains from the task files the run recorded, "
               "its index not readable now" if done.recorded else "no OSWorld index: every example under all/")
    say(f"exported {done.examples} example(s) to {done.folder} ({done.scored} with result.txt; {domains})")
    if done.without_files:
        say(f"no trajectory folder for {len(done.without_files)} task(s): {', '.join(done.without_files[:10])}",
            err=True)
