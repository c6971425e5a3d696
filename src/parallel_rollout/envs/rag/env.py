"""``rag`` mode: answer a question with a search tool over a local corpus, graded EM / F1.

A task::

    {"id": "wn-define-0001", "mode": "rag", "question": "Which noun means …?",
     "answers": ["dog", "domestic dog"], "corpus": "wordnet",
     "reference": {"queries": ["a member of the genus Canis …"], "answer": "dog"}}

``answers`` are the gold answers (any one counts); ``corpus`` is ``wordnet`` or a JSON-lines
file of documents (relative to the task file); ``reference`` is what the oracle replays: its
searches, then its answer (the first gold answer when it gives none).

Actions (JSON objects; the ``openai`` agent's replies are parsed into the same):

* ``{"search": "query", "k": 5}`` → the observation lists the ``k`` best documents (BM25;
  ``k`` ≤ 20, default 5) with id, title, text and score;
* ``{"answer": "text"}`` → ends the episode; graded as SQuAD grades (``grading.py``): the
  reward is token F1, or exact match with ``--rag-metric em``; both are recorded.

Anything else is answered with an ``error`` in the next observation, and costs a turn.

**No VM.** The corpus is a read-only file on the host and a search changes nothing, so there is
no state for a VM to isolate or reset: the search runs in the worker (``vm_scope = None``),
against the index the runner built before the workers started (``prepare_run``), which each
worker memory-maps once (``corpus.open_index``). A corpus that had to live inside a VM (a
search engine the agent may break) would be a mode of its own.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..base import Env, StepResult, reject_none, require, require_str_list
from .corpus import MAX_K, CorpusError, open_index, resolve_corpus
from .grading import grade

#: results per search when the action gives no ``k``
DEFAULT_K = 5
#: characters of one document's text shown in an observation
DOC_CHARS = 1200
METRICS = ("f1", "em")


def rag_path() -> Path:
    """The shipped question set (``--data rag``): WordNet questions, see the README."""
    return Path(str(resources.files("parallel_rollout.envs") / "data" / "rag_wordnet.jsonl"))


def task_dir(task) -> Path | None:
    """The folder of the file a task came from (``source`` is ``file:line``)."""
    return Path(task.source.rsplit(":", 1)[0]).parent if task.source else None


class RagEnv(Env):
    """Search a corpus, then answer; graded by EM / token F1 against the gold answers."""

    name = "rag"
    vm_scope = None
    options = frozenset({"rag_metric"})
    default_max_turns = 10

    #: the gold answers, the reference searches and answer, the gold documents; and where QA
    #: datasets keep the same: HotpotQA's ``answer`` and ``supporting_facts``, FlashRAG's and
    #: Search-R1's ``golden_answers``
    answer_fields = frozenset({"answers", "reference", "evidence", "answer", "golden_answers", "supporting_facts"})
    task_fields = frozenset({"question", "corpus"}) | answer_fields
    nested_fields = MappingProxyType({"reference": frozenset({"queries", "answer"})})
    seed_is_secret = False  # nothing in a rag episode draws on it

    @staticmethod
    def validate_task(payload: Mapping[str, Any]) -> None:
        """question, answers (non-empty strings), corpus; reference {queries, answer}."""
        require(payload, "question", str)
        if not payload["question"].strip():
            raise ValueError("field 'question' is empty")
        require_str_list(payload, "answers", optional=False)
        if not payload["answers"] or not all(a.strip() for a in payload["answers"]):
            raise ValueError("field 'answers' must hold at least one non-empty gold answer")
        require(payload, "corpus", str)
        require(payload, "reference", dict, optional=True)
        reference = payload.get("reference", {})
        require_str_list(reference, "queries", within="reference")
        require(reference, "answer", str, optional=True, within="reference")

    @staticmethod
    def reference_actions(task) -> list[Any]:
        """The reference searches, then the reference answer (else the first gold one)."""
        reference = task.get("reference") or {}
        answer = reference.get("answer", task.get("answers")[0])
        return [{"search": q, "k": DEFAULT_K} for q in reference.get("queries", [])] + [{"answer": answer}]

    @classmethod
    def prepare_run(cls, tasks) -> None:
        """Check every task's corpus and build each distinct one's index once, before any
        worker starts; TaskFileError naming the task's file and line otherwise."""
        from ...errors import TaskFileError

        sources = {}
        for task in tasks:
            try:
                source = resolve_corpus(task.get("corpus"), task_dir(task))
            except CorpusError as exc:
                raise TaskFileError(f"{task.source}: task {task.id!r}: {exc}") from None
            sources.setdefault(source.name, (source, task))
        for source, task in sources.values():
            try:
                open_index(source)
            except CorpusError as exc:
                raise TaskFileError(f"{task.source}: task {task.id!r}: {exc}") from None

    def reset(self, task, vm) -> dict[str, Any]:
        """Open the task's corpus index (mapped once per worker); show the question."""
        self.task = task
        self.index = open_index(resolve_corpus(task.get("corpus"), task_dir(task)))
        self.metric = getattr(self.config, "rag_metric", "f1")
        self.answer: str | None = None
        self.searches = 0
        return {"question": task.get("question"), "corpus": task.get("corpus"),
                "documents": self.index.size, "results": None}

    def step(self, action: Any) -> StepResult:
        """Run a search, or take the answer and end the episode."""
        reject_none(action, 'a rag action is {"search": "<query>", "k": <1-20>} or {"answer": "<text>"}')
        observation: dict[str, Any] = {"question": self.task.get("question")}
        if isinstance(action, dict) and isinstance(action.get("answer"), str):
            self.answer = action["answer"]
            return StepResult({**observation, "answer": self.answer}, done=True)
        if isinstance(action, dict) and isinstance(action.get("search"), str):
            k = action.get("k", DEFAULT_K)
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
                return StepResult({**observation, "error": f"k must be an integer from 1 to {MAX_K}"})
            self.searches += 1
            results = [{**doc, "text": doc["text"][:DOC_CHARS]} for doc in self.index.search(action["search"], k)]
            return StepResult({**observation, "query": action["search"], "results": results},
                              info={"hits": [doc["id"] for doc in results]})
        return StepResult({**observation, "error": (
            'an action is {"search": "<query>", "k": <1-20>} or {"answer": "<text>"}, '
            f"got {str(action)[:200]!r}")})

    def evaluate(self) -> tuple[float, dict[str, Any]]:
        """F1 (or EM) of the answer against the gold answers; 0 without an answer."""
        golds = self.task.get("answers")
        if self.answer is None:
            return 0.0, {"answer": None, "em": 0.0, "f1": 0.0, "searches": self.searches}
        scores = grade(self.answer, golds)
        details = {"answer": self.answer, **scores, "metric": self.metric, "searches": self.searches}
        return scores[self.metric], details
