"""Bad input, fuzzed with hypothesis: task files and the guest agent's routes.

Task files: random structure (any JSON value per line, a JSON list, gzip), unicode (line and
paragraph separators, NUL, surrogates' neighbours), huge fields, wrong types, bytes that are
not UTF-8. ``load_tasks`` either loads exactly the tasks of the file or raises TaskFileError
whose message starts with the file and, for a bad record, its line (``file:N:``) or item
(``file: item N:``) — never another exception. A file that is valid except for one bad record
names exactly that record. Through the CLI a bad file exits 2 with that message and no
traceback; a valid file of awkward but legal tasks runs to the end.

The guest agent, in a real sandbox (so nothing it is made to do reaches the host), gets
malformed bodies on every route, wrong content types, huge and truncated bodies, and garbage
HTTP: every answer is a 4xx with a message (or a 2xx when the fuzz happened to be valid), never
a 5xx or a dropped connection, and /health answers after each.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from chaos_support import reap_adopted_sandboxes  # noqa: F401 - an autouse fixture
from conftest import shell_task
from parallel_rollout.cli import main
from parallel_rollout.envs import task_validators
from parallel_rollout.errors import TaskFileError
from parallel_rollout.guest.client import GuestClient
from parallel_rollout.guest.agent_server import ROUTES
from parallel_rollout.pool.providers import ProviderOptions
from parallel_rollout.pool.providers.process import ProcessProvider
from parallel_rollout.results import read_records
from parallel_rollout.tasks import load_tasks

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- task files -------------------------------------------------------------------------------

#: text hypothesis may draw anywhere: every plane, plus characters that break naive splitting
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\u2028", "\u2029", "\x85", "\x00", "\ufeff", "\r", "é", "😀", "\\", "/", "..", " "]),
)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(),
                         st.floats(allow_nan=False, allow_infinity=False), TEXT)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
#: a field's value: any JSON, or one huge string
FIELD = st.one_of(JSON_VALUES, st.integers(100_000, 400_000).map(lambda n: "ü" * n))
SHELL_FIELDS = ("id", "mode", "instruction", "check", "setup", "reference", "seed", "tags", "timeout")


@st.composite
def task_like(draw) -> dict:
    """A shell task with some of its fields replaced, dropped, or joined by strangers."""
    task = shell_task(draw(st.text(min_size=1, max_size=20)))
    for name in draw(st.lists(st.sampled_from(SHELL_FIELDS), max_size=3, unique=True)):
        if draw(st.booleans()):
            task[name] = draw(FIELD)
        else:
            task.pop(name, None)
    task.update(draw(st.dictionaries(TEXT, JSON_VALUES, max_size=2)))
    return task


#: an id the loader must accept: 1-200 characters, not blank, no \\ newline or NUL, not . or ..
VALID_ID = st.one_of(
    st.text(st.characters(blacklist_characters="\\\n\x00", blacklist_categories=["Cs"]), min_size=1, max_size=30)
    .filter(lambda s: s.strip() and s not in (".", "..")),
    st.integers(-10**6, 10**6),
)


@st.composite
def valid_task(draw, task_id) -> dict:
    """A legal shell task with awkward values: unicode everywhere, maybe a huge instruction."""
    task = shell_task(str(task_id), id=task_id, instruction=draw(st.one_of(TEXT, FIELD.filter(lambda v: isinstance(v, str)))),
                      tags=draw(st.lists(TEXT, max_size=3)), mode="shell")
    if draw(st.booleans()):
        task["seed"] = draw(st.integers())
    if draw(st.booleans()):
        task["timeout"] = draw(st.floats(min_value=0.001, max_value=1e6))
    task.update(draw(st.dictionaries(TEXT.filter(lambda k: k not in SHELL_FIELDS and k != "task_id"),
                                     JSON_VALUES, max_size=2)))
    return task


@st.composite
def valid_tasks(draw) -> list[dict]:
    ids = draw(st.lists(VALID_ID, min_size=1, max_size=6, unique_by=str))
    return [draw(valid_task(task_id)) for task_id in ids]


#: one record of a file, as the bytes of its line
RECORD = st.one_of(
    st.builds(lambda t: json.dumps(t, ensure_ascii=False).encode(), task_like()),
    st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES),
    TEXT.map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=30),
    st.just(b""),
)


@st.composite
def task_file(draw, tmp: Path) -> tuple[Path, bool]:
    """A .jsonl, .json or gzipped task file: half of them legal (True), half of random records."""
    kind = draw(st.sampled_from([".jsonl", ".json", ".jsonl.gz", ".json.gz"]))
    legal = draw(st.booleans())
    if legal:
        # a legal file (it must load), in either format
        tasks = draw(valid_tasks())
        ascii_only = draw(st.booleans())
        if kind.startswith(".jsonl"):
            blank = draw(st.sampled_from(["", " ", "\t", "\r"]))
            data = ("\n" + blank + "\n").join(json.dumps(t, ensure_ascii=ascii_only) for t in tasks).encode()
        else:
            data = json.dumps(draw(st.sampled_from([tasks, {"tasks": tasks}])), ensure_ascii=ascii_only).encode()
    elif kind.startswith(".jsonl"):
        data = b"\n".join(draw(st.lists(RECORD, max_size=8)))
    else:
        items = draw(st.lists(st.one_of(task_like(), JSON_VALUES), max_size=6))
        data = json.dumps(draw(st.sampled_from([items, {"tasks": items}, items[:1] and items[0]])),
                          ensure_ascii=draw(st.booleans())).encode()
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]  # cut anywhere
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data  # a byte-order mark
    path = tmp / f"tasks{kind}"
    path.write_bytes(gzip.compress(data) if kind.endswith(".gz") else data)
    return path, legal


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).split(b"\n")


#: a message about one record: ``file:N: …`` or ``file: item N: …``
RECORD_ERROR = r"^{path}(?::(?P<line>\d+)|: item (?P<item>\d+)):"
#: a message about the whole file: ``file: …``
FILE_ERROR = r"^{path}: (no tasks in file|not a readable gzip file|task file not found|cannot read)"


def expected_records(path: Path) -> list:
    """The records a valid file holds: JSONL lines that are not blank, or the JSON list."""
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8-sig")
    if ".jsonl" in path.name:
        return [json.loads(line) for line in text.split("\n") if line.strip()]
    value = json.loads(text)
    return value["tasks"] if isinstance(value, dict) else value


@FUZZ
@given(data=st.data())
def test_fuzzed_task_files_load_or_name_file_and_line(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fuzz")
    path, legal = data.draw(task_file(tmp))
    default_mode = data.draw(st.sampled_from(["shell", None]))
    try:
        tasks = load_tasks(path, default_mode=default_mode, validators=task_validators())
    except TaskFileError as exc:
        message = str(exc)
        assert not legal, f"a legal file was refused: {message}"
        # several bad records: a line that counts them, then one line each (TaskFileError.of_records)
        lines = message.splitlines()
        several = re.match(rf"^{re.escape(str(path))}: (\d+) bad task records:$", lines[0])
        items = [line.strip() for line in lines[1:] if not line.strip().startswith("…")] if several else [message]
        if several:
            assert int(several[1]) >= len(items) >= 2, message
        for item in items:
            where = re.match(RECORD_ERROR.format(path=re.escape(str(path))), item)
            assert where or (not several and re.match(FILE_ERROR.format(path=re.escape(str(path))), item)), message
            if where and where["line"]:
                assert 1 <= int(where["line"]) <= len(lines_of(path)), message
        event("refused: " + ("records" if several else "a record" if where else "the file"))
        return
    event(f"loaded {min(len(tasks), 2)}+ tasks")
    # It loaded: then it holds exactly the file's records, in order, as tasks.
    records = expected_records(path)
    assert [t.id for t in tasks] == [str(r.get("id", r.get("task_id"))) for r in records]
    assert all(t.mode == "shell" for t in tasks)


#: a record that is wrong for certain, and a phrase its message must contain
BAD_RECORDS = st.sampled_from([
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "a task is a JSON object"),
    (b'"just a string"', "a task is a JSON object"),
    (b'{"mode": "shell", "instruction": "i", "check": "c"}', "missing field 'id'"),
    (b'{"id": true, "instruction": "i", "check": "c"}', "field 'id' must be a string"),
    (b'{"id": "x", "instruction": 5, "check": "c"}', "'instruction'"),
    (b'{"id": "x", "instruction": "i"}', "missing field 'check'"),
    (b'{"id": "x", "instruction": "i", "check": "c", "tags": "t"}', "'tags'"),
    (b'{"id": "x", "instruction": "i", "check": "c", "seed": 1.5}', "'seed'"),
    (b'{"id": "x", "instruction": "i", "check": "c", "timeout": -1}', "'timeout'"),
    (b'{"id": "x", "instruction": "i", "check": "c", "mode": "nope"}', "unknown mode"),
    (b'{"id": "..", "instruction": "i", "check": "c"}', "field 'id'"),
    (b'{"id": "x", "instruction": "\xff\xfe", "check": "c"}', "not UTF-8"),
])


@st.composite
def one_bad_record(draw, tmp: Path):
    """A JSONL file of valid (awkward) tasks with one certainly bad record at a known line."""
    ids = draw(st.lists(st.text(st.characters(blacklist_characters="\\\n\x00", blacklist_categories=["Cs"]),
                                min_size=1, max_size=12).filter(lambda s: s.strip() and s not in (".", "..")),
                        max_size=6, unique=True))
    lines = [json.dumps(shell_task(i, instruction=draw(TEXT)), ensure_ascii=draw(st.booleans())).encode()
             for i in ids if i != "x"]
    bad, phrase = draw(BAD_RECORDS)
    at = draw(st.integers(0, len(lines)))
    lines.insert(at, bad)
    path = tmp / "tasks.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, at + 1, phrase


@FUZZ
@given(data=st.data())
def test_one_bad_record_is_named_by_its_line(tmp_path_factory, data):
    path, line, phrase = data.draw(one_bad_record(tmp_path_factory.mktemp("bad")))
    with pytest.raises(TaskFileError) as info:
        load_tasks(path, default_mode="shell", validators=task_validators())
    assert str(info.value).startswith(f"{path}:{line}: "), (str(info.value), line)
    assert phrase in str(info.value)


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_cli_rejects_a_bad_task_file_with_exit_2_and_no_traceback(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("cli")
    path, line, phrase = data.draw(one_bad_record(tmp))
    result = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(path),
                                       "--output-dir", str(tmp / "out"), "--no-progress"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert "Traceback" not in result.output
    assert f"{path}:{line}: " in result.output and phrase in " ".join(result.output.split())
    assert not (tmp / "out").exists() or not any((tmp / "out").iterdir()), "a run started on a bad file"


def test_awkward_but_valid_tasks_run_through_the_cli(tmp_path):
    """Unicode, slashes, separators and a huge field are legal: the run finishes."""
    ids = ["ünï/cødé", "with space", "HumanEval/0", "\u2028sep", "😀", "a" * 200, "-dash", ".hidden"]
    tasks = [shell_task(f"t{n}", id=task_id, tags=["täg", "\u2029"]) for n, task_id in enumerate(ids)]
    tasks[0]["instruction"] = "ß" * 300_000
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks),
                                          encoding="utf-8")
    result = CliRunner().invoke(main, ["run", "--mode", "shell", "--data", str(tmp_path / "tasks.jsonl"),
                                       "--num-rollouts", "2", "--output-dir", str(tmp_path / "out"),
                                       "--run-id", "awkward", "--no-progress"])
    assert result.exit_code == 0, (result.output, result.exception)
    # read_records, not conftest's read_results: str.splitlines() would also break the lines
    # at the raw U+2029 of the tags, which JSON lines may hold (the store splits on \n only)
    records = read_records(tmp_path / "out" / "awkward" / "results.jsonl")
    assert sorted(r["key"] for r in records) == sorted(f"{i}#0" for i in ids)
    assert all(r["final"] and r["status"] == "success" for r in records), records
    assert {tuple(r["tags"]) for r in records} == {("täg", "\u2029")}


# -- the guest agent --------------------------------------------------------------------------


@pytest.fixture
def sandboxed_agent():
    """A guest agent in a real process-provider sandbox: a GuestClient and its socket path."""
    provider = ProcessProvider("fuzz-agent", ProviderOptions(boot_timeout_s=30))
    info = provider.start("vm-0")
    try:
        yield GuestClient(info.address, timeout_s=10), info.address[len("unix:"):]
    finally:
        provider.stop(info)


def raw(sock_path: str, payload: bytes) -> bytes:
    """Send raw bytes, close our side (EOF: a short body is seen as short), read the answer."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(sock_path)
        try:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent answered early (413) and closed: read what it said
        chunks = []
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def parse(answer: bytes) -> tuple[int, dict | bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def assert_refused_with_a_message(status: int, payload) -> None:
    assert 400 <= status < 500, (status, payload)
    assert isinstance(payload, dict), payload
    if status == 404 and payload == {"error": "File not found"}:
        return  # /file's OSWorld-compatible answer for a missing file
    assert payload.get("status") == "error" and payload.get("message"), payload


#: fields each JSON route requires, and a value of the right type (never used as is)
REQUIRED = {"/execute": "command", "/setup/execute": "command", "/run_python": "code",
            "/run_bash_script": "script", "/list_directory": "path"}
#: routes whose body is an empty object: only bodies that are not a JSON object are malformed
NO_FIELDS = {"/reap"}
#: wrong-typed values of a required field
WRONG = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                  st.lists(st.integers(), max_size=3), st.dictionaries(TEXT, JSON_SCALARS, max_size=2))
CONTENT_TYPES = st.sampled_from([None, "application/json", "text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data", "multipart/form-data; boundary=", 'multipart/form-data; boundary="b"',
                                 "application/json; charset=latin-1", "\u00e9/\u00e9"])


@st.composite
def malformed_body(draw, path: str) -> bytes:
    """A body that a route must refuse: not JSON, not an object, or its required field
    missing or of a wrong type (so no command ever runs)."""
    kinds = ["bytes", "non-object", "wrong-field", "missing-field", "huge"]
    kind = draw(st.sampled_from(kinds[:2] + kinds[4:] if path in NO_FIELDS else kinds))
    if kind == "bytes":
        body = draw(st.binary(min_size=1, max_size=200))
        assume(not body.strip().startswith(b"{"))
        return body
    if kind == "non-object":
        return json.dumps(draw(st.one_of(JSON_SCALARS, st.lists(JSON_VALUES, max_size=3)))).encode()
    if kind == "huge":
        return b"[" + b"1," * draw(st.integers(100_000, 600_000)) + b"1]"
    field = REQUIRED.get(path, "file_path")
    extra = draw(st.dictionaries(TEXT.filter(lambda k: k not in REQUIRED.values() and k != "file_path"),
                                 JSON_VALUES, max_size=3))
    if kind == "wrong-field":
        extra[field] = draw(WRONG.filter(lambda v: not (field == "command" and isinstance(v, list) and v)))
    return json.dumps(extra).encode()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_guest_routes_refuse_malformed_bodies_and_keep_serving(sandboxed_agent, data):
    client, sock = sandboxed_agent
    path = data.draw(st.sampled_from(sorted(p for p, (method, _) in ROUTES.items() if method == "POST")))
    body = data.draw(malformed_body(path))
    content_type = data.draw(CONTENT_TYPES) if path in ("/file", "/setup/upload") else "application/json"
    response = client.request("POST", path, data=body, content_type=content_type, check=False)
    try:
        payload = response.json()
    except ValueError:
        payload = response.body
    event(f"{path} answered {response.status}")
    assert_refused_with_a_message(response.status, payload)
    assert client.health()["status"] == "ok"


#: raw requests: garbage, a bad request line, bad headers, wrong lengths, huge and short bodies
RAW_REQUESTS = st.one_of(
    st.binary(min_size=1, max_size=300).filter(lambda b: b[:1] not in b"\r\n" and not b.startswith((b"GET ", b"POST "))),
    st.builds(lambda line: line + b"\r\n\r\n", st.binary(min_size=1, max_size=80).filter(lambda b: b"\n" not in b)),
    st.builds(lambda path, length, body: b"POST " + path + b" HTTP/1.1\r\nContent-Length: " + length + b"\r\n\r\n" + body,
              st.sampled_from([p.encode() for p in ROUTES]),
              st.one_of(st.sampled_from([b"-1", b"x", b"1e3", b"", b"99999999999999999999", b"\xff"]),
                        st.integers(1, 5000).map(lambda n: str(n).encode())),
              st.binary(max_size=100)),
    st.builds(lambda header: b"POST /execute HTTP/1.1\r\n" + header + b"\r\n\r\n{}",
              st.one_of(st.just(b"Transfer-Encoding: chunked"), st.just(b"X" * 20_000),
                        st.just(b"no-colon-here"), st.just(b"H: v\r\n" * 120))),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=RAW_REQUESTS)
def test_guest_refuses_garbage_http_and_keeps_serving(sandboxed_agent, request):
    client, sock = sandboxed_agent
    answer = raw(sock, request)
    assert answer.startswith(b"HTTP/1.1 "), (request[:100], answer[:200])
    status, payload = parse(answer)
    event(f"answered {status}")
    if status >= 400 or request.startswith(b"POST /execute HTTP/1.1\r\nTransfer"):
        assert_refused_with_a_message(status, payload)
    else:
        assert status < 300, (request[:100], answer[:300])
    assert client.health()["status"] == "ok"
