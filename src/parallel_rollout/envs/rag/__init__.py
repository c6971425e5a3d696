"""The ``rag`` mode: a search tool over a local corpus (BM25), answers graded by EM / F1.

``env`` (the mode), ``corpus`` (corpora and their cached index), ``grading`` (SQuAD's EM and
F1), ``wordnet`` (the WordNet corpus behind the shipped questions).
"""

from .env import RagEnv, rag_path

__all__ = ["RagEnv", "rag_path"]
