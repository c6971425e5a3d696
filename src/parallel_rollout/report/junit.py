"""JUnit XML of a run: one ``<testcase>`` per sample, as CI systems (Jenkins, GitLab, GitHub
Actions reporters) display natively.

Shape (the Ant/Jenkins JUnit schema that CI tools read)::

    <testsuites name=run-id tests failures errors skipped time>
      <testsuite name=run-id tests failures errors skipped time timestamp hostname>
        <properties><property name=mode value=shell/> …</properties>
        <testcase classname="<mode>.<task id>" name="<task>#<sample>" time="<duration>">
          <failure message=… type=<status>>traceback or eval details</failure>   graded failure
          <error message=… type=<status>>…</error>            infrastructure failure, final
          <skipped message=…/>                                 started, never final (resume)
        </testcase>
        <testcase classname="<mode>.run" name="samples without a result">  a run that stopped
          <error type=not_started message="N of T samples have no result …"/>  short of them
        </testcase>

Text that XML 1.0 cannot hold (control characters in a command's output) is replaced,
so the file always parses.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .files import write_whole
from .run_data import RunData

#: characters XML 1.0 forbids (besides tab, newline, carriage return)
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: characters of a failure's text kept in the file
_TEXT_LIMIT = 4000


def _clean(text: Any, limit: int = _TEXT_LIMIT) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))[:limit]


def _failure_text(record: dict[str, Any]) -> tuple[str, str]:
    failure = record.get("failure") or {}
    message = failure.get("message") or f"{record.get('status')} (reward {record.get('reward')})"
    body = failure.get("traceback") or ""
    if not body and record.get("eval") is not None:
        body = json.dumps(record["eval"], ensure_ascii=False, default=str)
    return _clean(message, 1000), _clean(body)


def junit_tree(data: RunData) -> ET.ElementTree:
    """The JUnit XML document of a run folder."""
    finals = data.finals
    last_attempt = {r["key"]: r for r in data.records}
    unfinished = sorted(set(last_attempt) - set(finals))
    cases = []
    failures = errors = 0
    total_time = 0.0
    for key in sorted(finals):
        record = finals[key]
        duration = float(record.get("duration_s") or 0.0)
        total_time += duration
        case = ET.Element("testcase", {
            "classname": _clean(f"{record.get('mode', data.mode)}.{record.get('task_id', key)}", 500),
            "name": _clean(key, 500), "time": f"{duration:.3f}",
        })
        if not record.get("success"):
            message, body = _failure_text(record)
            tag = "error" if record.get("infrastructure") else "failure"
            failures += tag == "failure"
            errors += tag == "error"
            element = ET.SubElement(case, tag, {"message": message, "type": _clean(record.get("status"), 200)})
            element.text = body
        cases.append(case)
    for key in unfinished:
        last = last_attempt[key]
        case = ET.Element("testcase", {
            "classname": _clean(f"{last.get('mode', data.mode)}.{last.get('task_id', key)}", 500),
            "name": _clean(key, 500), "time": "0.000",
        })
        ET.SubElement(case, "skipped", {"message": _clean(
            f"not finished: last attempt {last.get('attempt')} ended {last.get('status')}; resume the run", 1000)})
        cases.append(case)

    total = data.total
    if not isinstance(total, int):
        total = len(finals) + len(unfinished)
    without_result = max(total - len(finals), len(unfinished))
    if without_result > 0:
        # samples of the run with no final record (it stopped before them, or while they ran:
        # a cut attempt writes none; or after an attempt that failed on infrastructure, skipped
        # above): one case says so, as an error, so that CI shows an unfinished run as one. A
        # run whose every sample had such an attempt (a model endpoint down all night) had
        # only skipped cases, which CI shows as passed
        case = ET.Element("testcase", {"classname": _clean(f"{data.mode}.run", 500),
                                       "name": "samples without a result", "time": "0.000"})
        errors += 1
        retried = f" ({len(unfinished)} after an attempt that failed, skipped above)" if unfinished else ""
        ET.SubElement(case, "error", {"type": "not_started", "message": _clean(
            f"{without_result} of {total} samples have no result: the run stopped before they started "
            f"or while they ran{retried}; resume the run", 1000)})
        cases.append(case)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": str(errors),
              "skipped": str(len(unfinished)), "time": f"{total_time:.3f}"}
    root = ET.Element("testsuites", {"name": _clean(data.run_id, 500), **counts})
    started = data.started_at
    stamp = datetime.datetime.fromtimestamp(started if started is not None else os.path.getmtime(data.run_dir))
    suite = ET.SubElement(root, "testsuite", {
        "name": _clean(data.run_id, 500), **counts,
        "timestamp": stamp.replace(microsecond=0).isoformat(), "hostname": _clean(socket.gethostname(), 200),
    })
    properties = ET.SubElement(suite, "properties")
    for name in ("mode", "agent", "model", "data", "provider_name", "group_size"):
        if data.config.get(name) is not None:
            ET.SubElement(properties, "property", {"name": name, "value": _clean(data.config[name], 1000)})
    suite.extend(cases)
    return ET.ElementTree(root)


def write_junit(data: RunData, path: str | Path) -> Path:
    """Write the run's JUnit XML to ``path`` (whole or not at all) and return it."""
    tree = junit_tree(data)
    ET.indent(tree)
    return write_whole(path, lambda tmp: tree.write(tmp, encoding="utf-8", xml_declaration=True))
