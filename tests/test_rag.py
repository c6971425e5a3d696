"""The rag mode: BM25 search over a real corpus, answers graded as SQuAD grades them.

The shipped set (``--data rag``: questions made from WordNet, whose data files Debian's
wordnet-base installs) runs through the CLI with the oracle, every answer exact. A wrong or
partly right answer is scored against a SQuAD F1 / EM written here independently of the
mode's grader. Bad task files and corpora are refused, naming file and line, before any
worker starts. The openai agent drives the search tool through the real prompt and parser
against the local test server.
"""

from __future__ import annotations

import json
import re
import string
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from conftest import assert_exactly_once, read_results, write_tasks
from llm_server import first_user_message, llm_server, reply_with_counts  # noqa: F401 - fixture
from parallel_rollout.agents import prompts
from parallel_rollout.cli import main
from parallel_rollout.envs.rag import rag_path
from parallel_rollout.envs.rag.corpus import open_index, resolve_corpus
from parallel_rollout.envs.rag.grading import grade

pytest.importorskip("bm25s")
SHIPPED = [json.loads(line) for line in rag_path().read_text().splitlines() if line.strip()]

# A small corpus of real text: the opening sentences of Python's own module documentation.
DOCS = [
    {"id": "json", "title": "json", "text": "JSON (JavaScript Object Notation) is a lightweight data "
     "interchange format inspired by JavaScript object literal syntax."},
    {"id": "shlex", "title": "shlex", "text": "The shlex class makes it easy to write lexical analyzers "
     "for simple syntaxes resembling that of the Unix shell."},
    {"id": "heapq", "title": "heapq", "text": "This module provides an implementation of the heap queue "
     "algorithm, also known as the priority queue algorithm."},
    {"id": "bisect", "title": "bisect", "text": "This module provides support for maintaining a list in "
     "sorted order without having to sort the list after each insertion."},
]


def run(args: list[str]):
    return CliRunner().invoke(main, ["--no-progress", *args])


@pytest.fixture
def small_corpus(tmp_path, monkeypatch):
    """DOCS as a JSON-lines corpus, indexed into a cache of this test's own."""
    monkeypatch.setenv("PARALLEL_ROLLOUT_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return path


# -- the shipped set ---------------------------------------------------------------------------


def test_shipped_set_is_large_and_answerable_from_its_evidence():
    assert len(SHIPPED) >= 200 and len({t["id"] for t in SHIPPED}) == len(SHIPPED)
    assert {t["tags"][1] for t in SHIPPED} == {"define", "kind-of", "opposite"}
    index = open_index(resolve_corpus("wordnet"))
    for task in SHIPPED[::25]:
        hits = {doc["id"]: doc["text"] for doc in index.search(task["reference"]["queries"][0], 5)}
        assert task["evidence"][0] in hits, task["id"]


def test_oracle_answers_every_shipped_question_exactly(tmp_path):
    result = run(["--mode", "rag", "--data", "rag", "--num-rollouts", "2", "--envs-per-worker", "2",
                  "--output-dir", str(tmp_path), "--run-id", "oracle"])
    assert result.exit_code == 0, (result.output, result.exception)
    finals = assert_exactly_once(tmp_path / "oracle", {f"{t['id']}#0" for t in SHIPPED})
    not_exact = {k: r.get("eval") for k, r in finals.items() if r["eval"]["em"] != 1.0 or r["reward"] != 1.0}
    assert not not_exact
    # each episode searched with the reference query before it answered
    assert all(r["eval"]["searches"] == 1 for r in finals.values())


# -- grading: SQuAD's metric, written independently here ------------------------------------------


def squad_normalize(s: str) -> str:
    s = s.lower()
    s = "".join(c for c in s if c not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_f1(prediction: str, gold: str) -> float:
    p, g = squad_normalize(prediction).split(), squad_normalize(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return (2 * precision * recall) / (precision + recall)


def squad_scores(prediction: str, golds: list[str]) -> tuple[float, float]:
    em = max(float(squad_normalize(prediction) == squad_normalize(g)) for g in golds)
    return em, max(squad_f1(prediction, g) for g in golds)


CASES = [
    ("The Priority Queue!", ["priority queue"]),            # case, article, punctuation: exact
    ("heap queue algorithm", ["the priority queue algorithm"]),
    ("queue queue", ["priority queue"]),                    # repeated tokens count once each
    ("an ordered list", ["sorted order", "a list"]),       # best over several golds
    ("JavaScript", ["lightweight data interchange format"]),  # nothing shared
    ("lexical analyzers for the Unix shell", ["lexical analyzers"]),
]


@pytest.mark.parametrize("prediction, golds", CASES)
def test_grade_matches_squad(prediction, golds):
    em, f1 = squad_scores(prediction, golds)
    assert grade(prediction, golds) == pytest.approx({"em": em, "f1": f1})


def test_wrong_answers_score_f1_or_em_end_to_end(small_corpus, tmp_path):
    tasks = [
        {"id": "q1", "question": "What algorithm does heapq implement?", "answers": ["heap queue algorithm"],
         "corpus": "docs.jsonl", "reference": {"queries": ["heapq heap queue"]}, "submit": "the priority queue algorithm"},
        {"id": "q2", "question": "What does shlex help write?", "answers": ["lexical analyzers"],
         "corpus": "docs.jsonl", "reference": {"queries": ["shlex"]}, "submit": "analyzers of Unix shell syntax"},
        {"id": "q3", "question": "What is JSON?", "answers": ["a lightweight data interchange format"],
         "corpus": "docs.jsonl", "reference": {"queries": ["JSON"]}, "submit": "JavaScript"},
        {"id": "q4", "question": "What does bisect keep?", "answers": ["a list in sorted order"],
         "corpus": "docs.jsonl", "reference": {"queries": ["bisect"]}, "submit": "The list, in sorted order."},
    ]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    for metric in ("f1", "em"):
        result = run(["--mode", "rag", "--data", str(data), "--agent", "rag_agents:SubmitAgent", "--num-rollouts", "2",
                      "--rag-metric", metric, "--output-dir", str(tmp_path / "out"), "--run-id", metric])
        assert result.exit_code == 0, (result.output, result.exception)
        finals = assert_exactly_once(tmp_path / "out" / metric, {f"{t['id']}#0" for t in tasks})
        for task in tasks:
            em, f1 = squad_scores(task["submit"], task["answers"])
            record = finals[f"{task['id']}#0"]
            assert (record["eval"]["em"], record["eval"]["f1"]) == pytest.approx((em, f1)), task["id"]
            assert record["reward"] == pytest.approx(f1 if metric == "f1" else em), task["id"]
    rewards = {r["task_id"]: r["reward"] for r in read_results(tmp_path / "out" / "f1")}
    assert 0 < rewards["q1"] < 1 and rewards["q3"] == 0 and rewards["q4"] == 1


# -- the search tool ---------------------------------------------------------------------------


def test_search_ranks_by_bm25_and_bounds_k(small_corpus):
    index = open_index(resolve_corpus(str(small_corpus)))
    assert [d["id"] for d in index.search("priority queue algorithm", 2)][0] == "heapq"
    assert len(index.search("module list", 20)) <= len(DOCS)
    assert index.search("the of and", 3) == [] and index.search("zebra", 3) == []
    # loaded once per process: a second open is the same object
    assert open_index(resolve_corpus(str(small_corpus))) is index


def test_env_loops_of_a_worker_search_one_index_at_once(small_corpus):
    """K env loops are threads sharing one mapped index: each gets its own query's documents."""
    index = open_index(resolve_corpus(str(small_corpus)))
    queries = {d["id"]: d["text"] for d in DOCS}
    expected = {doc_id: index.search(text, 4) for doc_id, text in queries.items()}

    def searches(doc_id):
        return all(index.search(queries[doc_id], 4) == expected[doc_id] for _ in range(50))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: find any interleaving
    try:
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(searches, list(queries) * 4))
    finally:
        sys.setswitchinterval(interval)


# -- bad input: refused before anything runs, naming file and line ---------------------------------


GOOD = {"id": "ok", "question": "What is JSON?", "answers": ["a data interchange format"], "corpus": "docs.jsonl"}


@pytest.mark.parametrize("task, says", [
    ({"id": "q", "question": "What?", "corpus": "docs.jsonl"}, ["tasks.jsonl:2:", "missing field 'answers'"]),
    ({**GOOD, "id": "q", "answers": []}, ["tasks.jsonl:2:", "at least one non-empty gold answer"]),
    ({**GOOD, "id": "q", "answers": [" "]}, ["tasks.jsonl:2:", "at least one non-empty gold answer"]),
    ({**GOOD, "id": "q", "question": ""}, ["tasks.jsonl:2:", "'question' is empty"]),
    ({**GOOD, "id": "q", "corpus": "missing.jsonl"}, ["tasks.jsonl:2:", "corpus file not found", "missing.jsonl"]),
    ({**GOOD, "id": "q", "corpus": "broken.jsonl"}, ["tasks.jsonl:2:", "broken.jsonl:2:", "field 'text'"]),
])
def test_bad_input_is_refused_before_anything_runs(small_corpus, tmp_path, task, says):
    (tmp_path / "broken.jsonl").write_text(json.dumps(DOCS[0]) + "\n" + json.dumps({"id": "x"}) + "\n")
    data = write_tasks(tmp_path / "tasks.jsonl", [GOOD, task])
    result = run(["--mode", "rag", "--data", str(data), "--output-dir", str(tmp_path / "out"), "--run-id", "bad"])
    assert result.exit_code == 2, result.output
    for fragment in says:
        assert fragment in result.output, result.output
    assert not (tmp_path / "out" / "bad" / "results.jsonl").exists()


def test_a_missing_wordnet_says_which_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLEL_ROLLOUT_WORDNET", str(tmp_path / "nowhere"))
    result = run(["--mode", "rag", "--data", "rag", "--output-dir", str(tmp_path), "--run-id", "nownet"])
    assert result.exit_code == 2
    assert "rag_wordnet.jsonl:1:" in result.output and "wordnet-base" in result.output, result.output


# -- the openai agent: the real prompt and parser ------------------------------------------------


@pytest.mark.parametrize("reply, action", [
    ('```json\n{"search": "heap queue", "k": 3}\n```', {"search": "heap queue", "k": 3}),
    ('I will answer now: {"answer": "priority queue"}', {"answer": "priority queue"}),
    ("```json\n{broken\n```\n{\"answer\": \"x\"}", {"answer": "x"}),
    ("the answer is 42", "the answer is 42"),
])
def test_parse_rag(reply, action):
    assert prompts.parse("rag", reply) == action


def test_openai_agent_searches_then_answers(tmp_path, llm_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    tasks = {t["question"]: t for t in SHIPPED[::30]}

    def policy(body):
        task = next(t for q, t in tasks.items() if q in first_user_message(body))
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            return reply_with_counts(body, '```json\n{"search": %s, "k": 5}\n```' % json.dumps(task["reference"]["queries"][0]))
        # the search results reached the model: the evidence entry is in the last message
        assert f"id {task['evidence'][0]}" in body["messages"][-1]["content"]
        return reply_with_counts(body, '{"answer": %s}' % json.dumps(task["answers"][-1]))

    server = llm_server(policy=policy)
    data = write_tasks(tmp_path / "tasks.jsonl", list(tasks.values()))
    result = run(["--mode", "rag", "--data", str(data), "--agent", "openai", "--base-url", server.url,
                  "--num-rollouts", "2", "--output-dir", str(tmp_path / "out"), "--run-id", "llm"])
    assert result.exit_code == 0, (result.output, result.exception)
    finals = assert_exactly_once(tmp_path / "out" / "llm", {f"{t['id']}#0" for t in tasks.values()})
    assert all(r["reward"] == 1.0 and r["turns"] == 2 for r in finals.values())
    assert len(server.requests) == 2 * len(tasks)
    assert server.requests[0]["body"]["messages"][0]["content"] == prompts.RAG_SYSTEM


@pytest.mark.parametrize("gold, submits", [
    # an article ("A", the blood type or the vitamin): its right answer scored F1 0, and any
    # article or punctuation, "the", EM 1
    ("A", {"the": (0.0, 0.0), "An": (0.0, 0.0), "A.": (1.0, 1.0), "type A": (0.0, 2 / 3), "B": (0.0, 0.0)}),
    # punctuation alone (the operator "!"): an empty answer, or any other punctuation, scored EM 1
    ("!", {"": (0.0, 0.0), "?": (0.0, 0.0), "the": (0.0, 0.0), "!": (1.0, 1.0), " ! ": (1.0, 1.0)}),
], ids=["article", "punctuation"])
def test_a_gold_answer_that_normalization_empties_is_graded_on_what_it_says(small_corpus, tmp_path, gold, submits):
    """A gold answer that SQuAD's normalization empties is compared with its articles kept, or,
    when it is punctuation alone, as written (case and spacing aside)."""
    tasks = [{"id": f"q{n}", "question": "Which one is it?", "answers": [gold],
              "corpus": "docs.jsonl", "submit": submit} for n, submit in enumerate(submits)]
    data = write_tasks(tmp_path / "tasks.jsonl", tasks)
    for metric in ("f1", "em"):
        result = run(["--mode", "rag", "--data", str(data), "--agent", "rag_agents:SubmitAgent",
                      "--rag-metric", metric, "--output-dir", str(tmp_path / "out"), "--run-id", metric])
        assert result.exit_code in (0, 1), (result.output, result.exception)
        scores = {r["eval"]["answer"]: (r["eval"]["em"], round(r["eval"]["f1"], 6), round(r["reward"], 6))
                  for r in read_results(tmp_path / "out" / metric)}
        assert scores == {submit: (em, round(f1, 6), round(f1, 6) if metric == "f1" else em)
                          for submit, (em, f1) in submits.items()}, metric
