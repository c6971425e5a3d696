"""The end of a batch run: its ``summary.json``, its exit code and the message that says why.

::

    Runner.run ─► finish_run ─► summary.json (every session's counts, timings, VM figures,
                     │           a Ray run's nodes)
                     │        ─► the exit code: 130 interrupted, 1 stopped (the engine's
                     │           reason; 2 when the model endpoint refused the key or
                     │           model, or a VM is not what the settings ask), else 0
                     └─► report.gate.after_run: report.html, --junit-xml, the gates
                              (summary.json or report.html not written: exit 1, for the resume)

The summary lines (``format_summary``) and the message go to ``run.log`` here and to the
console from the caller (the CLI prints the lines, then the message); the message always
ends with the command that resumes the run.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig
from .exit_codes import EXIT_ABORTED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from .logs import NOT_ON_CONSOLE
from .provenance import SCHEMA_VERSION
from .report.files import CannotWrite, write_text_whole
from .report.run_data import results_stamp
from .records import sample_ends
from .results import carry_over, read_records, summarize

log = logging.getLogger("parallel_rollout")


@dataclass
class RunOutcome:
    """What a finished (or stopped) run hands back to the CLI or the Python caller."""

    exit_code: int
    run_dir: Path
    summary: dict[str, Any]
    message: str = ""
    #: a stop signal that came once every sample had ended: it changed nothing of the run
    late_signal: int | None = None


def finish_run(config: RunConfig, run_dir: Path, run_id: str, *, total: int,
               pool_stats: dict[str, Any] | None, started_at: float, interrupted: int | None,
               stopped: str | None, provenance: dict[str, Any] | None, resume_cmd: str,
               refused: bool = False, cluster: dict[str, Any] | None = None) -> RunOutcome:
    """Write the run's summary.json and decide its exit code: ``interrupted`` (the signal
    that stopped it), ``stopped`` (why the engine stopped it; ``refused``: the model endpoint
    refused the run's key or model, or a VM booted unlike the run's settings, a configuration
    error), else finished; then the report
    files and the gates (``report.gate.after_run``). ``cluster``: a Ray run's nodes (used, lost
    with why, left out: ``ray_pools.cluster_nodes``), its summary's ``ray``; None otherwise."""
    results = run_dir / "results.jsonl"
    stamp = results_stamp(run_dir)  # before reading: a change made meanwhile is a change
    records = read_records(results) if results.exists() else []
    earlier = read_summary(run_dir)
    summary = summarize(records, total_samples=total, pool_stats=pool_stats,
                        started_at=started_at, interrupted=bool(interrupted))
    carry_over(summary, earlier, records, started_at)
    summary["run_id"] = run_id
    summary["schema_version"] = SCHEMA_VERSION
    summary["provenance"] = provenance
    summary["ray"] = cluster  # this session's cluster: with VMs or without, which node it lost and why
    # the earlier sessions' (each rewrites summary.json): a --resume with --backend local, or on
    # another cluster, kept no record of the nodes the run lost before
    summary["ray_earlier"] = ray_sessions(earlier)
    # why the run stopped before its end (a pool exhausted, a dead manager, a model outage)
    summary["stopped"] = {"reason": stopped} if stopped and not interrupted else None
    # the results.jsonl this summary counted: `runs list` trusts the summary only while the
    # file is still that one (an edit, a corrupted line, a resume going on changes it)
    summary["results_file"] = stamp
    late = None
    if interrupted and not summary["unfinished"]:
        # every sample had ended (a signal as the run stopped its workers and VMs after its
        # last sample, or within the grace that let the last ones finish): it cut nothing, so
        # the run ends as it would have without it, its gates deciding its status
        late, interrupted = interrupted, None
        summary["interrupted"], summary["signal_after_end"] = False, late
        log.warning("signal %d came once every sample had ended: the run finished", late)
    unwritten = [reason for reason in [write_summary(run_dir, summary)] if reason]
    # what the CLI prints last (the caller's to print): run.log ends the same way
    for line in format_summary(summary, run_dir).splitlines():
        log.info("%s", line, extra=NOT_ON_CONSOLE)
    if interrupted:
        message = f"interrupted by signal {interrupted}; resume with: {resume_cmd}"
        code = EXIT_INTERRUPTED
    elif stopped:
        message = f"run stopped: {stopped}\nresume with: {resume_cmd}"
        code = EXIT_USAGE if refused else EXIT_ABORTED
    elif summary["ungraded"]:
        message = ungraded_message(records, summary["ungraded"], config.max_retries, resume_cmd)
        code = EXIT_ABORTED
    else:
        message = ""
        code = EXIT_OK
    if message:  # the caller says it last (the CLI after the summary): run.log keeps it
        log.error(message, extra=NOT_ON_CONSOLE)
    from .report.gate import after_run

    code, message = after_run(config, run_dir, code, message, summary, unwritten=unwritten)
    if unwritten and code == EXIT_OK:  # a cron job must learn that its run's files are missing
        code = EXIT_ABORTED
        them = "it" if len(unwritten) == 1 else "them"
        message = f"{'; '.join(unwritten)}; every sample is final: once there is room, {resume_cmd} writes {them}"
        log.error(message, extra=NOT_ON_CONSOLE)
    return RunOutcome(code, run_dir, summary, message, late_signal=late)


def signal_after_the_end(signum: int, frame: object) -> None:
    """A stop signal once the run has ended (its engine closed, every record stored): its
    summary, report, JUnit file and gates take a moment and are written whole first, and the
    outcome is the run's own. Before, the CLI's early handler was back then: the finish
    broke off, with no report or JUnit file, saying 'before the run started: nothing ran'."""
    log.warning("signal %d after the run's end: writing its summary, report and gates first", signum)


#: why a group of samples (by their records' ``task_fault``) was never graded, and what a
#: resume does with them
_UNGRADED = (
    (None, "each ended on an infrastructure failure {retried}",
     "A resume runs them again (once each) once the cause is fixed: {resume}"),
    ("file_missing", "a file each task names is not there, not retried",
     "A resume runs them again (once each) once the file is there: {resume}"),
    ("task_file", "each ended on its task file's own error, not retried",
     "A resume does not run them again (it refuses an edited task file): fix the task and run it in a new "
     "run (another --run-id)"),
)


def ungraded_message(records: list[dict[str, Any]], count: int, max_retries: int, resume_cmd: str) -> str:
    """Why a run whose samples all ended is no result yet: ``count`` of them ended on an
    infrastructure failure after their retries, or on their task file's own error (not
    retried, not run again by a resume), so they have no score (not a 0)."""
    finals = sample_ends(records)
    groups: dict[Any, list[str]] = {}
    for key, end in sorted(finals.items()):
        if end.get("infrastructure"):
            groups.setdefault(end.get("task_fault"), []).append(key)
    said = []
    for fault, why, then in _UNGRADED:
        if keys := groups.get(fault):
            retried = _retried(max_retries, {finals[key].get("attempt") for key in keys})
            said.append(f"{len(keys)} sample(s) were never graded: {why.format(retried=retried)} "
                        f"({_named(finals, keys)}); the gates were not applied. {then.format(resume=resume_cmd)}")
    return "\n".join(said) or f"{count} sample(s) were never graded"


def _retried(max_retries: int, last_attempts: set[Any]) -> str:
    """How often the samples were tried again: by ``--max-retries``, and once more by each
    resume (their ``last_attempts``, numbered from 0). 'after --max-retries 1 retries' read
    wrong for one, said retries never made for 0, and a sample a nightly resume ran a third
    time was still 'after its one retry'."""
    made = sorted(n for n in last_attempts if isinstance(n, int))
    if not made or made == [max_retries]:
        if max_retries == 0:
            return "with no retry (--max-retries 0)"
        return f"after {_retries(max_retries)} (--max-retries {max_retries})"
    count = _retries(made[0]) if len(made) == 1 else f"{made[0]}-{made[-1]} retries"
    return f"after {count} (--max-retries {max_retries}, and one more attempt by each resume)"


def _retries(count: int) -> str:
    """'its one retry', 'its 2 retries', 'no retry'."""
    return "no retry" if count == 0 else "its one retry" if count == 1 else f"its {count} retries"


def _named(finals: dict[str, dict[str, Any]], keys: list[str]) -> str:
    """The statuses of the samples ``keys``, the first five, and the first one's failure."""
    kinds = Counter(str(finals[key].get("status")) for key in keys)
    last = _elided(str((finals[keys[0]].get("failure") or {}).get("message") or ""))
    return (f"{', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}; "
            f"{', '.join(keys[:5])}{' …' if len(keys) > 5 else ''}; last: {last}")


def _elided(message: str, head: int = 120, tail: int = 300) -> str:
    """``message``, its middle cut (marked ``…``) when long: the end is kept, where a message
    says what to do (an osworld download's 'without network, put the file at PATH')."""
    return message if len(message) <= head + tail else f"{message[:head]} … {message[-tail:]}"


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The summary an earlier session of this run wrote, if it is readable."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def write_summary(run_dir: Path, summary: dict[str, Any]) -> str | None:
    """Write summary.json whole or not at all, and never raise: on a full disk the run must
    still release its lock and say how to resume (exit 1: summary.json is rewritten by the
    resume). Returns why it was not written, or None."""
    try:
        write_text_whole(run_dir / "summary.json", json.dumps(summary, indent=2))
    except CannotWrite as exc:
        log.error("%s", exc)
        return str(exc)
    return None


#: ``Runner.program`` of a run a Python call made (``api.run``): its resume is a call too
PYTHON_PROGRAM = "run()"


def resume_command(program: str, output_dir: str, run_id: str) -> str:
    """The command that resumes a run (--resume reads the rest from config.json), or the
    call, for a run a Python call made."""
    if program == PYTHON_PROGRAM:
        return f"run(output_dir={str(output_dir)!r}, run_id={run_id!r}, resume=True)"
    argv = ["--output-dir", output_dir, "--run-id", run_id, "--resume"]
    return " ".join([program, *(shlex.quote(a) for a in argv)])


def format_summary(summary: dict[str, Any], run_dir: Any) -> str:
    """A few readable lines from summary.json: what the CLI prints at the end of a run, and
    run.log keeps."""
    rate = f"success rate {_pct(summary['success_rate'])}, mean reward {summary['mean_reward']}"
    if summary.get("ungraded"):  # infrastructure failures are no score: the graded samples' figures
        rate = (f"success rate of the graded samples {_pct(summary.get('success_rate_graded'))}, "
                f"{summary['ungraded']} never graded, mean reward of the graded samples {summary['mean_reward']}")
    # a run that finished no sample (an empty one, one stopped at once) has no score to give
    scores = (f", {summary['successes']} succeeded ({rate})" if summary["finished"]
              else ": no success rate, no mean reward")
    lines = [
        f"run {summary.get('run_id')}: {summary['finished']}/{summary['total_samples']} samples finished{scores}",
        "statuses: " + (", ".join(f"{k} {v}" for k, v in summary["status_counts"].items()) or "none"),
        f"attempts: {summary['attempts']} ({summary['retried_attempts']} retried"
        + (f", {summary['attempts_left_to_resume']} left to --resume)" if summary.get("attempts_left_to_resume") else ")"),
    ]
    values = {name: value for name, value in summary.items() if name.startswith("pass@")}
    if values:
        from .results import pass_at_k_text

        lines.append(pass_at_k_text(values, summary.get("pass_at_k_tasks") or {}, summary.get("tasks_finished", 0)))
    lines += _tag_lines(summary.get("per_tag") or {})
    timing = summary["timing_s"]
    if timing.get("rollout"):
        # with no sample finished, the times are those of attempts that failed (a lease the
        # dead pool never gave): no rollout's
        what = ("rollout time" if summary["finished"]
                else f"no sample finished; time of its {timing['rollout']['count']} failed attempt(s):")
        lines.append(f"{what} p50 {timing['rollout']['p50']}s p90 {timing['rollout']['p90']}s, "
                     f"wall {timing['wall']}s")
    usage = summary.get("usage") or {}
    if usage.get("requests"):
        lines.append(f"model: {usage['requests']} requests ({usage.get('retries', 0)} retried), "
                     f"{usage.get('prompt_tokens', 0)} prompt + {usage.get('completion_tokens', 0)} completion tokens")
    for url, answer in (summary.get("servers_refused") or {}).items():
        lines.append(f"server taken out of the rotation, it refused the run's settings: {url} ({_elided(answer)})")
    for url, why in (summary.get("servers_failed") or {}).items():
        lines.append(f"server left out for its cool-down, it failed: {url} ({_elided(why)})")
    vm = summary.get("vm")
    if vm:
        # --backend ray: a lost node's VMs are not the pool's deaths (it could not count them)
        lost = [n for n in (vm.get("nodes") or {}).values() if isinstance(n, dict) and n.get("lost")]
        # a run whose every pool was lost has no pool's counters, only their size and states
        lines.append(f"VMs: {vm.get('size')} {vm.get('provider')}"
                     + (f" + {vm['spare_vms']} spare" if vm.get("spare_vms") else "")  # booted beyond them
                     + f", utilization {_pct(vm.get('utilization'))}, "
                     f"{vm.get('resets', 0)} resets"
                     + (f" ({vm['released_not_reset']} released, not reset)" if vm.get("released_not_reset") else "")
                     + f", {vm.get('marked_dead', 0)} died, "
                     + (f"{sum(n.get('size', 0) for n in lost)} lost with {len(lost)} Ray node(s), " if lost else "")
                     # a VM that broke under a task, or was killed from outside, restarts from
                     # its snapshot; only a replacement spends the budget
                     + (f"{vm['restarts']} restarted from the snapshot, " if vm.get("restarts") else "")
                     + f"{vm.get('replacements', 0)} replaced")
    lines += _ray_lines(summary)
    lines.append(f"results: {run_dir}/")
    return "\n".join(lines)


def _tag_lines(per_tag: dict[str, Any], shown: int = 8) -> list[str]:
    """Each tag's figures (an OSWorld run's domains, as its show_result.py gives them) when
    there are several; a few, the rest counted (summary.json and the report have them all)."""
    if len(per_tag) < 2:
        return []
    lines = ["per tag:"] + [f"  {tag}: {row['successes']}/{row['finished']} succeeded ({_pct(row['success_rate'])})"
                            for tag, row in list(per_tag.items())[:shown]]
    if len(per_tag) > shown:
        lines.append(f"  … and {len(per_tag) - shown} more (summary.json's per_tag)")
    return lines


def ray_sessions(earlier: dict[str, Any] | None) -> list[dict[str, Any]]:
    """summary.json's ``ray_earlier``: the ``ray`` sections of the sessions before this one
    that ran on a Ray cluster, oldest first (from the earlier summary's own and its ``ray``)."""
    kept = (earlier or {}).get("ray_earlier")
    sessions = [s for s in kept if isinstance(s, dict)] if isinstance(kept, list) else []
    return sessions + [earlier["ray"]] if isinstance((earlier or {}).get("ray"), dict) else sessions


def _ray_lines(summary: dict[str, Any]) -> list[str]:
    """--backend ray: each node the run lost, with why, and each it left out (never used),
    in this session and, marked so, in earlier ones (``ray_earlier``); a summary from before
    the ``ray`` section has only its VM runs' nodes left out."""
    earlier = summary.get("ray_earlier") if isinstance(summary.get("ray_earlier"), list) else []
    return _session_ray_lines(summary) + [
        f"{line} (an earlier session)" for section in earlier if isinstance(section, dict)
        for line in _session_ray_lines({"ray": section})]


def _session_ray_lines(summary: dict[str, Any]) -> list[str]:
    ray = summary.get("ray") if isinstance(summary.get("ray"), dict) else {}
    nodes = ray.get("nodes") if isinstance(ray.get("nodes"), dict) else {}
    lines = [f"Ray node {str(node_id)[:8]} lost: {_elided(str(said.get('reason') or ''))}"
             for node_id, said in nodes.items() if isinstance(said, dict) and said.get("lost")]
    # the vm section's: a summary from before the ray section (a local session's is null, its vm
    # section an earlier Ray session's when it ran nothing)
    left_out = ray.get("nodes_left_out") if "ray" in summary else (summary.get("vm") or {}).get("nodes_left_out")
    for node_id, why in (left_out or {}).items():
        lines.append(f"Ray node {str(node_id)[:8]} left out of the run: {_elided(str(why))}")
    return lines


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
