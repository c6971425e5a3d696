"""Corpora and their BM25 index: built once per corpus, cached on disk, mapped read-only.

::

    task "corpus": "wordnet" | "docs.jsonl" ──► CorpusSource (files + how to read documents)
        │ sha256 of the files' bytes (+ index format) = the corpus hash
        ▼
    <cache>/rag/<hash>/   bm25s index (.npy arrays, vocabulary) + corpus.jsonl + its line index
        ▲ built once, under a file lock, in a temporary folder renamed into place
        │ (the runner builds it before any worker starts: ``RagEnv.prepare_run``)
        └── every worker: ``open_index`` → bm25s.BM25.load(mmap=True): the arrays and the
            documents are memory-mapped read-only, shared through the page cache, never rebuilt

Retrieval is BM25 from ``bm25s`` (the ``[rag]`` extra, imported only here and only when a
rag run needs it), with its English stop words and no stemming. ``<cache>`` is
``$PARALLEL_ROLLOUT_CACHE`` or ``$XDG_CACHE_HOME/parallel-rollout`` (``~/.cache/…``).

A corpus is a named collection (``wordnet``: see ``wordnet.py``) or a JSON-lines file of
``{"id": str, "text": str, "title": str?}``, a relative path being relative to the task file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ...pool.providers.host_dirs import rag_cache
from . import wordnet

#: bump when the documents or the index are made differently: old caches are not reused
INDEX_FORMAT = 1
#: the most results one search returns
MAX_K = 20


class CorpusError(ValueError):
    """A corpus that is missing or malformed; the message names the file (and line)."""


@dataclass(frozen=True)
class CorpusSource:
    """Where a corpus's documents come from."""

    #: what the task said ("wordnet", or the path as resolved)
    name: str
    #: the files whose bytes make the corpus hash
    files: tuple[Path, ...]
    #: reads the documents: {"id", "title", "text"} each
    read: Callable[[], Iterable[dict[str, str]]]

    def digest(self) -> str:
        """The corpus hash: sha256 of the index format and every file's bytes (computed once
        per process while the files keep their size and modification time)."""
        stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in self.files)
        with _OPEN_LOCK:
            known = _DIGESTS.get(stamp)
        if known is None:
            known = self._hash()
            with _OPEN_LOCK:
                _DIGESTS[stamp] = known
        return known

    def _hash(self) -> str:
        sha = hashlib.sha256(f"parallel-rollout rag index v{INDEX_FORMAT}\n".encode())
        for path in self.files:
            sha.update(f"{path.name}\n".encode())
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    sha.update(block)
        return sha.hexdigest()


_OPEN_LOCK = threading.Lock()
#: (path, size, mtime) of a source's files -> its digest
_DIGESTS: dict[tuple, str] = {}

#: named corpora: name -> (files, documents)
NAMED = {"wordnet": (wordnet.data_files, wordnet.documents)}


def resolve_corpus(spec: str, base_dir: Path | None = None) -> CorpusSource:
    """The source behind a task's ``corpus`` field; CorpusError when it cannot be read."""
    if spec in NAMED:
        files_of, read = NAMED[spec]
        try:
            files = tuple(files_of())
        except FileNotFoundError as exc:
            raise CorpusError(f"corpus {spec!r}: {exc}") from None
        return CorpusSource(spec, files, read)
    path = Path(spec).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.is_file():
        raise CorpusError(
            f"corpus file not found: {path} (a corpus is {', '.join(sorted(NAMED))} or a "
            "JSON-lines file of {\"id\", \"text\", \"title\"?} documents)"
        )
    return CorpusSource(str(path), (path,), lambda: read_jsonl_corpus(path))


def read_jsonl_corpus(path: Path) -> Iterator[dict[str, str]]:
    """The documents of a JSON-lines corpus; CorpusError naming ``file:line`` for a bad one."""
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise CorpusError(f"{where}: not valid JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise CorpusError(f"{where}: a document is a JSON object")
            for name in ("id", "text"):
                if not isinstance(doc.get(name), str) or not doc[name].strip():
                    raise CorpusError(f"{where}: field {name!r} must be a non-empty string")
            if doc["id"] in seen:
                raise CorpusError(f"{where}: document id {doc['id']!r} appears twice")
            seen.add(doc["id"])
            yield {"id": doc["id"], "title": str(doc.get("title", "")), "text": doc["text"]}


def cache_root() -> Path:
    """The folder holding every cached index (``host_dirs.rag_cache``)."""
    return rag_cache()


def _bm25s():
    try:
        import bm25s
    except ImportError:
        raise CorpusError(
            "the rag mode needs bm25s: pip install 'parallel-rollout[rag]'"
        ) from None
    return bm25s


def _tokenize(bm25s, texts: list[str]):
    return bm25s.tokenize(texts, stopwords="en", show_progress=False)


def build_index(source: CorpusSource, dest: Path) -> dict[str, Any]:
    """Index ``source`` into ``dest`` (a new folder); the build's numbers."""
    bm25s = _bm25s()
    started = time.perf_counter()
    docs = list(source.read())
    if not docs:
        raise CorpusError(f"corpus {source.name}: no documents")
    retriever = bm25s.BM25()
    retriever.index(_tokenize(bm25s, [f"{d['title']}\n{d['text']}" for d in docs]), show_progress=False)
    retriever.save(str(dest), corpus=docs, show_progress=False)
    # Make the corpus's line index now, so workers only ever read the folder.
    bm25s.utils.corpus.JsonlCorpus(str(dest / "corpus.jsonl"), show_progress=False, verbosity=0)
    built = {"corpus": source.name, "documents": len(docs), "build_s": time.perf_counter() - started,
             "built_at": time.time(), "pid": os.getpid(), "bm25s": getattr(bm25s, "__version__", "?")}
    (dest / "built.json").write_text(json.dumps(built))
    return built


def ensure_index(source: CorpusSource) -> Path:
    """The cached index folder of ``source``, building it first when no process has."""
    import filelock

    folder = cache_root() / source.digest()
    if (folder / "built.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(folder) + ".lock"):
        if (folder / "built.json").exists():  # another process built it while we waited
            return folder
        scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            build_index(source, scratch)
            if folder.exists():  # a half-made folder from a build that was killed
                shutil.rmtree(folder)
            os.rename(scratch, folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


class Index:
    """A loaded index: ``search(query, k)`` over the memory-mapped arrays and documents."""

    def __init__(self, folder: Path) -> None:
        bm25s = _bm25s()
        self._bm25s = bm25s
        self.folder = folder
        self.retriever = bm25s.BM25.load(str(folder), load_corpus=True, mmap=True, show_progress=False)
        self.size = int(self.retriever.scores["num_docs"])
        # bm25s reads a document by seek + readline on one shared mmap: the env loops
        # (threads) of a worker must not interleave those
        self._lock = threading.Lock()

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` best documents for ``query``, best first, each with its BM25 score."""
        k = max(1, min(int(k), MAX_K, self.size))
        tokens = [t for t in self._bm25s.tokenize([query], stopwords="en", return_ids=False,
                                                   show_progress=False)[0]
                  if t in self.retriever.vocab_dict]
        if not tokens:
            return []
        with self._lock:
            ids, scores = self.retriever.retrieve([tokens], k=k, show_progress=False, n_threads=1)
        found = []
        for doc_index, score in zip(ids[0], scores[0]):
            if score <= 0:
                continue
            doc = doc_index
            found.append({"id": doc["id"], "title": doc.get("title", ""), "text": doc["text"],
                          "score": round(float(score), 4)})
        return found


_OPEN: dict[Path, Index] = {}


def open_index(source: CorpusSource) -> Index:
    """The index of ``source``, loaded once per process (the env loops of a worker share it)."""
    folder = ensure_index(source)
    with _OPEN_LOCK:
        index = _OPEN.get(folder)
        if index is None:
            index = _OPEN[folder] = Index(folder)
        return index
