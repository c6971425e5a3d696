"""A grading command's start (``PARALLEL_ROLLOUT_GRADING_SINCE``) tells the graded code's
files from the check's own by their ctime: the wrappers trust a package.json, an .npmrc or a
makefile dated since (npm, make, javac, pytest). So every file written before the start must
be dated before it, and every file the command writes after it, on this machine's kernel and
file system, whichever clock dates its files."""

from __future__ import annotations

import subprocess

from parallel_rollout.guest.agent_grading import GRADING_BIN, GRADING_SINCE, grading_since


def _ns(since: str) -> int:
    seconds, _, nanoseconds = since.partition(".")
    return int(seconds) * 10**9 + int(nanoseconds)


def test_what_was_written_before_the_start_is_dated_before_it_and_what_after_after(tmp_path):
    # the answer's last writes, a file made and one rewritten whose times were read (a
    # kernel of multigrain timestamps dates that one by the fine clock), then the check's
    for turn in range(100):
        made, rewritten = tmp_path / f"made{turn}", tmp_path / f"rewritten{turn % 3}"
        made.write_text("x")
        rewritten.write_text("x")
        since = grading_since()
        check = tmp_path / f"check{turn % 3}"
        check.write_text("x")
        dated = {p.name: p.stat().st_ctime_ns - _ns(since) for p in (made, rewritten, check)}
        assert dated[made.name] < 0 and dated[rewritten.name] < 0 < dated[check.name], (turn, dated)


def test_the_wrappers_trust_only_what_the_check_made_since(tmp_path):
    for turn in range(10):
        answer = tmp_path / "package.json"
        answer.write_text("{}")
        env = {"PATH": "/usr/bin:/bin", GRADING_SINCE: grading_since()}
        check = tmp_path / f"check{turn}"
        judged = subprocess.run(
            ["sh", "-c", f'. "{GRADING_BIN}/wrap.sh"; echo x > "$2"; made_by_the_check "$1" && echo answer; '
                         'made_by_the_check "$2" && echo check', "sh", str(answer), str(check)],
            env=env, capture_output=True, text=True, timeout=30)
        assert judged.stdout == "check\n", (turn, judged.stdout, judged.stderr)
