"""The end of a run: write its report files, then judge it against the run's gates.

``after_run`` is the one call the runner makes once ``summary.json`` is written. It writes
``report.html`` and ``--junit-xml`` when asked (for every run, finished or not), then, for a run that finished
(exit 0), applies the gates a nightly job sets:

* ``--fail-under RATE``: the success rate (final samples) below RATE → exit 3;
* ``--compare-to RUN_ID``: a significant regression against that run of the same
  ``--output-dir`` (``compare.Comparison.regressed``) → exit 4; no shared sample, an
  unfinished baseline (``cannot_judge``), no such run (``missing_baseline``: a nightly
  job's missed night, warned of at the run's start) or one that cannot be read (a
  corrupted line) → exit 5, as is a gate that raised: never 0; the comparison is kept
  as ``compare-<RUN_ID>.txt`` and ``.html`` in the run folder.

An aborted or interrupted run keeps its own exit code: a gate judges finished runs only.
Nothing here may raise into the runner (it must still release its lock): a report that
cannot be written is logged and the run's exit code stands.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..logs import NOT_ON_CONSOLE
from ..exit_codes import EXIT_ABORTED, EXIT_BELOW_THRESHOLD, EXIT_NO_VERDICT, EXIT_OK, EXIT_REGRESSION
from ..errors import ConfigError
from .compare import compare_runs, format_comparison
from .compare_html import write_compared
from .files import CannotWrite
from .html import write_report
from .junit import write_junit
from .run_data import RunData, runs_near
from ..setting_names import RESUME_READS, typed_text

log = logging.getLogger("parallel_rollout")


def gate(config: Any, data: RunData) -> tuple[int, str]:
    """The exit code and message of a finished run's gates (EXIT_OK and "" when all pass)."""
    failed: list[tuple[int, str]] = []
    missing = missing_baseline(config)
    if missing:
        failed.append((EXIT_NO_VERDICT, f"--compare-to {config.compare_to}: no verdict: {missing}"
                                        f"{kept_gate(config, 'compare_to')}"))
    elif config.compare_to is not None:
        failed += [(code, message + kept_gate(config, "compare_to")) for code, message in _against_baseline(config, data)]
    if config.fail_under is not None:
        rate = exact_success_rate(data.summary or {})
        if rate is None or rate < config.fail_under:
            shown, threshold = _pcts_apart(rate, config.fail_under)
            failed.append((EXIT_BELOW_THRESHOLD,
                           f"success rate {shown} is below --fail-under {typed_text(config.fail_under)} ({threshold})"
                           f"{kept_gate(config, 'fail_under')}"))
    if not failed:
        return EXIT_OK, ""
    # The threshold wins over the regression: it is the promise a nightly job states.
    failed.sort(key=lambda item: item[0] != EXIT_BELOW_THRESHOLD)
    return failed[0][0], "\n".join(message for _, message in failed)


def _against_baseline(config: Any, data: RunData) -> list[tuple[int, str]]:
    """The ``--compare-to`` gate's failure (none when it passed). A baseline that cannot be
    read (a corrupted line, a file the run may not read) is no verdict, never a pass: it
    raised past the gates, and a run at 0% success exited 0, its --fail-under not applied."""
    name = config.compare_to
    baseline, unreadable = _read_baseline(config)
    if baseline is None:
        return [(EXIT_NO_VERDICT, f"--compare-to {name}: no verdict: {unreadable}")]
    comparison = compare_runs(baseline, data)
    text = format_comparison(comparison)
    log.info("%s", text)
    for warning in comparison.warnings:
        log.warning("--compare-to %s: %s", name, warning)
    try:  # files that cannot be written (a full disk) are said; the verdict stands
        write_compared(comparison, text, baseline, data)
    except CannotWrite as exc:
        log.error("%s", exc)
    if comparison.cannot_judge:
        return [(EXIT_NO_VERDICT, f"--compare-to {name}: no verdict: {comparison.cannot_judge}")]
    if comparison.regressed:
        return [(EXIT_REGRESSION,
                 f"significant regression against {name}: success rate "
                 f"{_pct(comparison.success_rate_a)} -> {_pct(comparison.success_rate_b)} on "
                 f"{comparison.shared} shared samples, {len(comparison.pass_to_fail)} pass->fail, "
                 f"{_test_name(comparison)} p={comparison.pass_fail.p_value:.4g}")]
    return []


def kept_gate(config: Any, name: str) -> str:
    """What a gate's message adds when a resume kept the gate from the run's config.json (its
    command line did not give it): where it comes from, and how to drop it ("" otherwise)."""
    if not str(getattr(config, "sources", {}).get(name, "")).endswith(RESUME_READS):
        return ""
    flag = "--" + name.replace("_", "-")
    return f" ({flag} kept from the run's config.json; {flag} none drops it)"


def _read_baseline(config: Any) -> tuple[RunData | None, str]:
    """The ``--compare-to`` run read back, or None and why it cannot be (a corrupted line of
    its results.jsonl, a file the run may not read)."""
    try:
        return RunData.load(Path(config.output_dir) / config.compare_to, with_events=False), ""
    except OSError as exc:
        return None, f"cannot read {exc.filename}: {exc.strerror}"
    except ConfigError as exc:
        return None, f"cannot read the baseline: {exc}"


def baseline_problem(config: Any) -> str:
    """Why the ``--compare-to`` gate will give no verdict whatever the run does, known at its
    start ("" when none): no such run (``missing_baseline``), or one that cannot be read."""
    if config.compare_to is None:
        return ""
    return missing_baseline(config) or _read_baseline(config)[1]


def missing_baseline(config: Any) -> str:
    """Why ``--compare-to`` names no run of ``--output-dir`` ("" when it names one): the run
    goes on all the same, as a nightly job must after a night that did not run."""
    if config.compare_to is None:
        return ""
    baseline = Path(config.output_dir) / config.compare_to
    # a run stopped before its first result has its config.json alone: unfinished, not missing
    if (baseline / "results.jsonl").is_file() or (baseline / "config.json").is_file():
        return ""
    if baseline.is_dir():
        return f"{baseline} holds no results.jsonl (no such run in --output-dir)"
    near = runs_near(config.output_dir, str(config.compare_to), config.run_id)  # a misspelt name's
    return f"{baseline}: no such run folder in --output-dir" + (f" (the nearest by name: {', '.join(near)})" if near else "")


def after_run(config: Any, run_dir: Path, exit_code: int, message: str,
              summary: dict[str, Any] | None = None, unwritten: list[str] | None = None) -> tuple[int, str]:
    """Write the run's report files and apply its gates; returns the final (code, message).
    ``summary``: the one the run made, which they judge even when summary.json could not be
    written (a full disk): read back, an earlier session's passed a --fail-under this
    session's numbers missed. ``unwritten``: gets why report.html was not written."""
    try:
        data = RunData.load(run_dir)
    except Exception:  # noqa: BLE001 - a report must never cost the run its lock release
        log.exception("cannot read %s back for its report", run_dir)
        return exit_code, message
    if summary is not None:
        data.summary = summary
    try:
        write_report(data)
    except CannotWrite as exc:  # a full disk, a read-only folder: said, not a traceback
        log.error("%s", exc)
        if unwritten is not None:
            unwritten.append(str(exc))
    except Exception:  # noqa: BLE001
        log.exception("cannot write %s", run_dir / "report.html")
    if config.junit_xml:
        try:
            write_junit(data, config.junit_xml)
        except Exception as exc:  # noqa: BLE001
            # CI reads the file, not the log: a run that wrote none must not look passed
            # (1: a resume of the finished run writes it again, once the path is fixed)
            reason = exc.reason if isinstance(exc, CannotWrite) else exc
            log.error("cannot write the JUnit XML %s: %s", config.junit_xml, reason,
                      exc_info=not isinstance(exc, CannotWrite))
            if exit_code == EXIT_OK:
                return EXIT_ABORTED, (f"cannot write the JUnit XML {config.junit_xml}: {reason}; "
                                      "fix the path and resume")
    if exit_code != EXIT_OK:
        return exit_code, message
    try:
        code, gate_message = gate(config, data)
    except Exception as exc:  # noqa: BLE001
        log.exception("cannot apply the run's gates")
        if config.fail_under is None and config.compare_to is None:
            return exit_code, message
        # a gate that could not judge is no pass: a scheduler must not read 0
        return EXIT_NO_VERDICT, f"the run's gates could not be applied: {exc}"
    if gate_message:  # the caller says it last, as run_end's message (the CLI after the summary)
        log.error("%s", gate_message, extra=NOT_ON_CONSOLE)
    return code, "\n".join(m for m in (message, gate_message) if m)


def _test_name(comparison: Any) -> str:
    """How the pass/fail test of a comparison is named in messages."""
    if comparison.clustered:
        return f"Wilcoxon signed-rank over {comparison.tasks} tasks"
    return "McNemar exact"


def exact_success_rate(summary: dict[str, Any]) -> float | None:
    """The success rate a gate compares: successes over graded samples, unrounded (the
    summary's ``success_rate`` is rounded to 4 places, so 2 of 3 passed --fail-under 0.66669
    and 1 of 3 failed --fail-under 0.33333). A summary without the counts has its figure."""
    successes, finished, ungraded = (summary.get(k) for k in ("successes", "finished", "ungraded"))
    if all(isinstance(n, int) for n in (successes, finished, ungraded)):
        return successes / (finished - ungraded) if finished > ungraded else None
    return summary.get("success_rate")


def _pcts_apart(rate: float | None, threshold: float) -> tuple[str, str]:
    """Both as percentages, with as many decimals as it takes to tell them apart (at most 4)."""
    for places in range(1, 5):
        shown, limit = (f"{rate:.{places}%}" if rate is not None else "-"), f"{threshold:.{places}%}"
        if shown != limit:
            break
    return shown, limit


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
