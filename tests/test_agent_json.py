"""``guest/agent_json``: the agent's JSON through ``_json`` alone answers what ``json`` answers,
for the documents it reads and writes and for the malformed ones it refuses."""

from __future__ import annotations

import json
import math

import pytest

from parallel_rollout.guest import agent_json

DOCUMENTS = [
    {}, [], "", 0, -1, 10**40, 1.5, -0.0, 1e300, 2.5e-8, True, False, None,
    {"command": ["ls", "-l", "~/x"], "shell": False, "timeout": 30, "cwd": None},
    {"nested": {"a": [1, [2, [3, {"b": "c"}]]], "empty": {}}},
    {"text": "quote \" backslash \\ slash / tab \t newline \n nul \x00 bell \x07"},
    {"unicode": "héllo wörld ✓ 日本語 😀", "surrogate-pair": "\U0001f600"},
    {"order": {"z": 1, "a": 2, "m": 3}},
]


@pytest.mark.parametrize("value", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_it_writes_and_reads_what_json_does(value) -> None:
    assert agent_json._encode is not None and agent_json._scan is not None, "not on _json"
    text = agent_json.dumps(value)
    assert text == json.dumps(value)
    assert agent_json.loads(text) == value
    assert agent_json.loads(text.encode("utf-8")) == value
    spaced = f" \n\t{json.dumps(value, indent=2)}\r\n "
    assert agent_json.loads(spaced.encode("utf-8")) == json.loads(spaced)


def test_the_constants_and_encodings_json_takes() -> None:
    assert agent_json.dumps([math.nan, math.inf, -math.inf]) == "[NaN, Infinity, -Infinity]"
    value = agent_json.loads(b"[NaN, Infinity, -Infinity]")
    assert math.isnan(value[0]) and value[1:] == [math.inf, -math.inf]
    for data in (b'\xef\xbb\xbf{"a": 1}', '{"a": 1}'.encode("utf-16"),
                 '{"a": 1}'.encode("utf-32-le")):
        assert agent_json.loads(data) == json.loads(data) == {"a": 1}


@pytest.mark.parametrize("text", [
    "", "   ", "{not json", '{"a": 1} extra', '{"a": 1,}', "[1, 2", '"unterminated',
    '{"a": "control \x01 char"}', "01", "{'single': 1}", "nul", '{"a" 1}',
])
def test_a_malformed_document_raises_json_own_error(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        agent_json.loads(text.encode("utf-8"))
    assert str(got.value) == str(expected.value)


def test_what_json_cannot_write_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        agent_json.dumps({"a": {1, 2}})
