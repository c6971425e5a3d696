"""results.jsonl, resume and the run folder: torn and corrupted lines, a full disk, summaries,
resume identity, and the lock that keeps two runs out of one folder."""

from __future__ import annotations

import errno
import json
import math
import os
import time

import pytest
from click.testing import CliRunner

from conftest import shell_task, small_tmpfs, write_tasks
from parallel_rollout.cli import main
from parallel_rollout.agents.oracle import OracleAgent
from parallel_rollout.run_end import write_summary
from parallel_rollout.results import ResultStore, StorageError, pass_at_k, percentiles, read_records, summarize


class PatientOracle(OracleAgent):
    """The oracle under another name: a run made with a different --agent."""


def record(key: str, attempt: int = 0, *, final: bool = True, status: str = "success", reward: float = 1.0,
           mode: str = "shell", tags: tuple[str, ...] = (), duration: float | None = 1.0,
           infrastructure: bool = False, pad: int = 0) -> dict:
    """An attempt record shaped like the worker's."""
    task_id, _, sample = key.partition("#")
    return {"key": key, "task_id": task_id, "sample_idx": int(sample or 0), "attempt": attempt,
            "mode": mode, "tags": list(tags), "status": status, "reward": reward,
            "success": status == "success", "infrastructure": infrastructure, "final": final,
            "duration_s": duration, "lease_wait_s": 0.01, "pad": "x" * pad}


# -- the store ------------------------------------------------------------------------------


def test_append_load_round_trip(tmp_path):
    store = ResultStore(tmp_path)
    store.append(record("a#0", 0, final=False, status="vm_error", reward=0.0, infrastructure=True))
    store.append(record("a#0", 1))
    store.append(record("b#0", 0, status="failure", reward=0.0))
    store.append(record("c#0", 0, final=False, status="worker_died", reward=0.0, infrastructure=True))
    store.append({**record("d#0"), "note": "ünïcødé \u2028 line separator"})
    # e#0 never graded (its retries used up), then graded by a resume: that record ends it
    store.append({**record("e#0", 0, final=False, status="vm_error", reward=0.0, infrastructure=True),
                  "never_graded": True})
    store.append(record("e#0", 1))
    store.close()
    index = ResultStore(tmp_path).load()
    assert index.records == 7 and index.torn_bytes == 0
    assert set(index.final) == {"a#0", "b#0", "d#0", "e#0"}  # c#0 still needs a final attempt
    assert index.final["e#0"]["attempt"] == 1
    assert index.attempts == {"a#0": 1, "b#0": 0, "c#0": 0, "d#0": 0, "e#0": 1}
    assert index.final["d#0"]["note"] == "ünïcødé \u2028 line separator"
    assert [r["key"] for r in read_records(tmp_path / "results.jsonl")] == ["a#0", "a#0", "b#0", "c#0", "d#0",
                                                                          "e#0", "e#0"]


@pytest.mark.parametrize("field, value, says", [
    ("reward", float("nan"), "field 'reward' is nan"),
    ("eval", {"detail": ["ok", float("-inf")]}, "field 'eval'['detail'][1] is -inf"),
    ("eval", {"out": "caf\u00e9 \udcff"}, "field 'eval'['out'] holds a lone surrogate"),
    ("task_id", "a\ud800", "field 'task_id' holds a lone surrogate"),
    # as the worker fails it: not written as its str()
    ("eval", {"seen": {"x"}}, "field 'eval'['seen'] is of type set"),
    ("meta", {"when": object()}, "field 'meta'['when'] is of type object"),
])
def test_a_record_no_line_can_hold_is_written_as_its_failure(tmp_path, field, value, says):
    """The store's own guard (whatever got past the worker's): the record becomes, in place,
    its sample's unstorable_result failure; the line written is strict JSON in UTF-8."""
    store = ResultStore(tmp_path)
    store.append(record("ok#0"))
    bad = {**record("bad#0"), "run_id": "r", field: value}
    store.append(bad)
    store.close()
    assert bad["status"] == "unstorable_result" and bad["reward"] == 0.0 and not bad["success"]
    assert bad["final"] and bad["run_id"] == "r" and bad["key"] == "bad#0"
    assert says in bad["failure"]["message"], bad["failure"]

    def refuse(name):
        raise AssertionError(f"{name} written")

    lines = (tmp_path / "results.jsonl").read_bytes().decode("utf-8").splitlines()
    written = [json.loads(line, parse_constant=refuse) for line in lines]
    assert [r["key"] for r in written] == ["ok#0", "bad#0"] and written[1] == bad
    assert ResultStore(tmp_path).load().final.keys() == {"ok#0", "bad#0"}


def test_an_unstorable_result_is_a_failed_rl_member():
    """An RL group member whose record could not be stored produced no episode: the
    scheduler drops its group (or masks it), it never trains on a reward of 0 it did not earn."""
    from parallel_rollout.rl.groups import Trajectory

    member = Trajectory(tag="t", group_id=0, episode_id=0, member=0, trajectory_id="t/0/0",
                        task_id="a", seed=None, created_step=0, status="unstorable_result")
    assert member.failed


def test_load_of_a_new_folder_is_empty(tmp_path):
    index = ResultStore(tmp_path).load()
    assert (index.records, index.final, index.attempts) == (0, {}, {})


def test_torn_last_line_is_ignored_reported_and_moved_aside(tmp_path, caplog):
    store = ResultStore(tmp_path)
    store.append(record("a#0"))
    store.append(record("b#0"))
    store.close()
    path = tmp_path / "results.jsonl"
    whole = path.read_bytes()
    torn = json.dumps(record("c#0")).encode()[:40]  # a crash mid-write: no newline
    path.write_bytes(whole + torn)
    store = ResultStore(tmp_path)
    index = store.load()
    assert path.read_bytes() == whole + torn  # reading changes nothing: a resume may still be refused
    with caplog.at_level("WARNING", logger="parallel_rollout"):
        store.repair(index)
    assert set(index.final) == {"a#0", "b#0"} and index.torn_bytes == len(torn)
    assert "torn last line" in caplog.text and "results.jsonl.torn" in caplog.text
    assert (tmp_path / "results.jsonl.torn").read_bytes() == torn + b"\n"
    assert path.read_bytes() == whole
    store.append(record("c#0"))  # starts on a fresh line, not glued to the torn bytes
    store.close()
    assert [r["key"] for r in read_records(path)] == ["a#0", "b#0", "c#0"]
    assert set(ResultStore(tmp_path).load().final) == {"a#0", "b#0", "c#0"}


@pytest.mark.parametrize("bad_line", [b"{not json", b'{"no_key": 1}', b"[1, 2]", b'{"key": "a#0", "attempt": "x"}'])
def test_corrupted_middle_line_names_file_and_line(tmp_path, bad_line):
    path = tmp_path / "results.jsonl"
    lines = [json.dumps(record("a#0")).encode(), bad_line, json.dumps(record("b#0")).encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(StorageError, match=rf"{path}:2: corrupted record"):
        ResultStore(tmp_path).load()


class FailingFile:
    """A fake results file: forwards to the real file, but its writes can be made to land
    partly and then fail with ENOSPC, the way a filling disk behaves."""

    def __init__(self, real) -> None:
        self.real = real
        #: bytes the next failing write lets through before ENOSPC; None = no failure
        self.partial: int | None = None

    def write(self, data: bytes) -> int:
        if self.partial is None:
            return self.real.write(data)
        if self.partial:
            count = self.real.write(data[: self.partial])
            self.partial = 0
            return count
        self.partial = None
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def tell(self) -> int:
        return self.real.tell()

    def fileno(self) -> int:
        return self.real.fileno()

    def close(self) -> None:
        self.real.close()


def test_failed_writes_are_cut_back_to_the_last_complete_line(tmp_path):
    """Each failed append leaves exactly the earlier lines; later appends are whole lines."""
    store = ResultStore(tmp_path)
    store.append(record("a#0"))
    good = (tmp_path / "results.jsonl").read_bytes()
    fake = FailingFile(store._fh)
    store._fh = fake
    # a long partial write, then a shorter one: the second cut must not go by the first's size
    for partial in (60, 20):
        fake.partial = partial
        with pytest.raises(StorageError) as info:
            store.append(record("b#0", pad=100))
        assert "No space left on device" in str(info.value) and "--resume" in str(info.value)
        assert str(tmp_path / "results.jsonl") in str(info.value)
        assert (tmp_path / "results.jsonl").read_bytes() == good
    store.append(record("c#0"))
    store.close()
    data = (tmp_path / "results.jsonl").read_bytes()
    assert b"\0" not in data and data.endswith(b"\n")
    assert [r["key"] for r in read_records(tmp_path / "results.jsonl")] == ["a#0", "c#0"]
    assert ResultStore(tmp_path).load().torn_bytes == 0


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: a real ENOSPC. Needs root (this container has it)."""
    with small_tmpfs(tmp_path / "disk", "64k") as folder:
        yield folder


def test_full_disk_raises_storage_error_and_keeps_whole_lines(tiny_disk):
    filler = tiny_disk / "filler"
    filler.write_bytes(b"f" * 40 * 1024)
    store = ResultStore(tiny_disk)
    written = 0
    with pytest.raises(StorageError) as info:
        for i in range(100):  # ~1.9 KB each: the ~24 KiB left fill up within ~13
            store.append(record(f"t{i}#0", pad=1800))
            written += 1
    assert 3 < written < 100
    message = str(info.value)
    assert f"cannot write {tiny_disk / 'results.jsonl'}: No space left on device" in message
    assert "--resume" in message
    data = (tiny_disk / "results.jsonl").read_bytes()
    assert data.endswith(b"\n") and len(data.splitlines()) == written
    # space freed: the same store goes on, on a fresh line
    filler.unlink()
    store.append(record("after#0", pad=1800))
    store.close()
    index = ResultStore(tiny_disk).load()
    assert index.records == written + 1 and index.torn_bytes == 0 and "after#0" in index.final


# -- summary --------------------------------------------------------------------------------


@pytest.mark.parametrize("n, c, k", [(1, 0, 1), (1, 1, 1), (5, 0, 1), (5, 2, 1), (5, 2, 3), (5, 4, 2),
                                     (10, 3, 5), (10, 9, 10), (4, 1, 4), (20, 7, 1)])
def test_pass_at_k_matches_the_formula(n, c, k):
    """pass@k = 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_known_values():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0


@pytest.mark.parametrize("n, c, k", [(2, 0, 3), (3, 1, 0)])
def test_pass_at_k_rejects_k_outside_1_to_n(n, c, k):
    """k > n has no unbiased estimate (it used to say 1.0 for zero successes)."""
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_percentiles_interpolate_between_order_statistics():
    """statistics.quantiles' inclusive rule (numpy's default): p90 of 1..100 is 90.1."""
    p = percentiles(float(v) for v in range(1, 101))
    assert (p["p50"], p["p90"], p["p99"], p["max"], p["mean"]) == (50.5, 90.1, 99.01, 100.0, 50.5)
    assert p["count"] == 100 and percentiles([1.0, 2.0], points=(95,))["p95"] == 1.95
    assert percentiles([]) is None
    assert percentiles([3.0])["p50"] == 3.0


@pytest.mark.parametrize("never_graded", [True, False], ids=["never_graded", "older-final"])
def test_a_never_graded_samples_cut_off_resume_attempt_is_left_to_resume(never_graded):
    """A resume ran c#0 (never graded after attempts 0 and 1) again, and its attempt 2 was
    cut off (a non-final record): that attempt is left to --resume, not retried; the
    non-final attempt before the never-graded record was retried."""
    lost = record("c#0", 1, status="worker_died", reward=0.0, infrastructure=True)
    if never_graded:
        lost.update(final=False, never_graded=True)
    records = [record("a#0", status="success"),
               record("c#0", 0, final=False, status="worker_died", reward=0.0, infrastructure=True),
               lost,
               record("c#0", 2, final=False, status="vm_error", reward=0.0, infrastructure=True)]
    s = summarize(records, total_samples=2, pool_stats=None, started_at=time.time())
    assert s["attempts_left_to_resume"] == 1 and s["retried_attempts"] == 1, s


@pytest.mark.parametrize("never_graded", [True, False], ids=["never_graded", "older-final"])
def test_summary_counts_rates_groups_and_timings(never_graded):
    """c#0 ran out of retries on an infrastructure failure: its record is ``never_graded``
    (not final), or, written by an older version, final: the same summary either way."""
    lost = record("c#0", status="worker_died", reward=0.0, infrastructure=True, mode="other", duration=None)
    if never_graded:
        lost.update(final=False, never_graded=True)
    records = [
        # task a: 3 samples, 1 success; task b: 3 samples, 3 successes (one after a retry)
        record("a#0", status="success", tags=("x",), duration=1.0),
        record("a#1", status="failure", reward=0.0, tags=("x",), duration=2.0),
        record("a#2", status="max_turns", reward=0.5, tags=("x",), duration=3.0),
        record("b#0", 0, final=False, status="vm_error", reward=0.0, infrastructure=True, duration=4.0),
        record("b#0", 1, status="success", tags=("x", "y"), duration=5.0),
        record("b#1", status="success", tags=("y",), duration=6.0),
        record("b#2", status="success", tags=("y",), duration=7.0),
        # task c: 3 samples, an infrastructure failure that ran out of retries: no score, no 0
        lost,
        record("c#1", status="failure", reward=0.0, mode="other", duration=8.0),
        record("c#2", status="success", mode="other", duration=9.0),
    ]
    s = summarize(records, total_samples=10, pool_stats={"utilization": 0.5}, started_at=time.time() - 2)
    assert s["total_samples"] == 10 and s["finished"] == 9 and s["unfinished"] == 1
    assert s["status_counts"] == {"failure": 2, "max_turns": 1, "success": 5, "worker_died": 1}
    # over the graded samples, as the console says it: c#0 has no score, so no 0 either
    assert s["successes"] == 5 and s["success_rate"] == s["success_rate_graded"] == round(5 / 8, 4)
    assert s["ungraded"] == 1 and s["attempts_left_to_resume"] == 0
    assert s["mean_reward"] == round(5.5 / 8, 4)  # over the graded samples
    assert s["attempts"] == 10 and s["retried_attempts"] == 1
    assert s["per_mode"]["shell"] == {"finished": 6, "successes": 4, "success_rate": round(4 / 6, 4),
                                      "mean_reward": round(4.5 / 6, 4)}
    assert s["per_mode"]["other"]["finished"] == 3 and s["per_mode"]["other"]["successes"] == 1
    assert s["per_mode"]["other"]["success_rate"] == 0.5  # of c#1 and c#2
    assert s["per_mode"]["other"]["mean_reward"] == 0.5  # c#1 and c#2; c#0 has no score
    assert s["per_tag"] == {"x": {"finished": 4, "successes": 2, "success_rate": 0.5, "mean_reward": round(2.5 / 4, 4)},
                            "y": {"finished": 3, "successes": 3, "success_rate": 1.0, "mean_reward": 1.0}}
    # pass@k over each task's graded samples: c has 2, so none of pass@3
    expected_k1 = (pass_at_k(3, 1, 1) + pass_at_k(3, 3, 1) + pass_at_k(2, 1, 1)) / 3
    expected_k3 = (pass_at_k(3, 1, 3) + pass_at_k(3, 3, 3)) / 2
    assert s["pass@1"] == round(expected_k1, 4) == round((1 / 3 + 1 + 1 / 2) / 3, 4)
    assert s["pass@3"] == round(expected_k3, 4) == 1.0  # every task solved at least once
    rollout = s["timing_s"]["rollout"]
    assert (rollout["p50"], rollout["max"]) == (5.0, 9.0)  # the middle of 9 timed attempts
    assert s["timing_s"]["lease_wait"]["p50"] == 0.01
    assert s["timing_s"]["wall"] >= 2 and s["vm"] == {"utilization": 0.5}


def test_summary_pass_at_k_with_a_failing_group():
    records = [record(f"a#{i}", status="failure", reward=0.0) for i in range(4)]
    records += [record(f"b#{i}", status="success" if i == 0 else "failure", reward=float(i == 0)) for i in range(4)]
    s = summarize(records, total_samples=8, pool_stats=None, started_at=time.time())
    assert s["pass@1"] == pytest.approx((0 + 0.25) / 2)
    assert s["pass@4"] == pytest.approx((0 + 1) / 2)


def test_summary_without_groups_or_records():
    s = summarize([record("a#0")], total_samples=1, pool_stats=None, started_at=time.time())
    assert not any(k.startswith("pass@") for k in s)
    empty = summarize([], total_samples=3, pool_stats=None, started_at=time.time())
    assert (empty["finished"], empty["success_rate"], empty["mean_reward"], empty["status_counts"]) == (0, None, None, {})
    assert empty["timing_s"]["rollout"] is None


def test_the_summary_says_no_rollout_time_of_attempts_that_ran_no_sample():
    """A run whose pool died before any sample ran printed 'rollout time p50 0.05s': the times
    of its attempts that failed to get a VM, said as those of rollouts."""
    from parallel_rollout.run_end import format_summary

    failed = [record(f"a#{i}", final=False, status="pool_exhausted", reward=0.0, duration=0.05,
                     infrastructure=True) for i in range(2)]
    said = format_summary(summarize(failed, total_samples=2, pool_stats=None, started_at=time.time()), "out")
    assert "rollout time" not in said, said
    assert "no sample finished; time of its 2 failed attempt(s): p50 0.05s p90 0.05s, wall" in said, said
    ran = format_summary(summarize([record("a#0")], total_samples=1, pool_stats=None, started_at=time.time()), "out")
    assert "rollout time p50 1.0s p90 1.0s, wall" in ran, ran


def test_a_summary_the_disk_cannot_hold_is_logged_not_raised(tiny_disk, caplog):
    """The run's end writes summary.json on a full disk: an error line naming the file, no
    exception (the run still releases its lock and says how to resume), no .tmp left."""
    (tiny_disk / "filler").write_bytes(b"f" * 60 * 1024)
    with caplog.at_level("ERROR", logger="parallel_rollout"):
        write_summary(tiny_disk, {"pad": "x" * 20000})
    assert f"cannot write {tiny_disk / 'summary.json'}: No space left on device" in caplog.text
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler"]


def test_the_console_summary_gives_each_tag_its_line_when_there_are_several(tmp_path):
    """summary.json and the report had per-tag (an OSWorld run's per-domain) figures, the
    console none: one line per tag when there are several, 8 of them at most."""
    def run(tasks, run_id):
        result = CliRunner().invoke(main, ["--mode", "shell", "--data", str(write_tasks(tmp_path / f"{run_id}.jsonl", tasks)),
                                           "--output-dir", str(tmp_path / "out"), "--run-id", run_id, "--no-progress"])
        assert result.exit_code in (0, 1), result.output
        return result.output

    missed = {"check": "false"}  # the oracle's reference runs, the check fails
    said = run([shell_task("a0", tags=["chrome"]), shell_task("a1", tags=["chrome"], **missed),
                shell_task("b0", tags=["os"])], "two")
    assert "per tag:\n  chrome: 1/2 succeeded (50.0%)\n  os: 1/1 succeeded (100.0%)\n" in said, said
    one = run([shell_task("a0", tags=["os"]), shell_task("a1", tags=["os"])], "one")
    assert "per tag" not in one, one  # the run's own line says it
    many = run([shell_task(f"t{i}", tags=[f"d{i:02}"]) for i in range(12)], "many")
    assert "  d07: 1/1 succeeded (100.0%)\n  … and 4 more (summary.json's per_tag)\n" in many, many
    assert "d08:" not in many, many
