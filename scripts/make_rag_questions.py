#!/usr/bin/env python3
"""Make the rag mode's shipped question set from WordNet (``--data rag``).

The questions are generated from WordNet's own structure, so every gold answer is in the
corpus the mode searches (``parallel_rollout.envs.rag.wordnet``), with three kinds:

* ``define``   — "Which noun/adjective/verb means "<definition>"?" → the synset's words (any one counts);
                 reference query: the definition;
* ``kind-of``  — "What is a <word> a kind of?" → the words of its hypernym (e.g. a dachshund
                 is a kind of hound), for a word with one sense in WordNet and one hypernym;
                 reference query: the word;
* ``opposite`` — "What is the opposite of the adjective "<word>"?" → its antonym, for a word
                 with one sense in WordNet; reference query: the word.

A candidate is kept only when its reference query, searched with the mode's own BM25 index,
returns the entry holding the answer among the top 5 (so the oracle's searches really find
the evidence) and its question is unambiguous (a unique definition, a word of one sense).
Candidates are drawn with a fixed seed: the same WordNet gives the same file.

    python scripts/make_rag_questions.py            # writes src/parallel_rollout/envs/data/rag_wordnet.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

from parallel_rollout.envs.rag.corpus import open_index, resolve_corpus
from parallel_rollout.envs.rag.grading import normalize_answer
from parallel_rollout.envs.rag.wordnet import entry_text, read_synsets

OUT = Path(__file__).resolve().parent.parent / "src" / "parallel_rollout" / "envs" / "data" / "rag_wordnet.jsonl"
COUNTS = {"define": 120, "kind-of": 100, "opposite": 80}
TOP_K = 5
_WORD = re.compile(r"^[a-z]{4,}$")


def candidates(synsets):
    """(kind, question, answers, reference query, evidence synset id) of every candidate."""
    senses = Counter(lemma.lower() for s in synsets.values() for lemma in set(s.lemmas))
    definitions = Counter(s.definition for s in synsets.values())
    found = {kind: [] for kind in COUNTS}
    for s in synsets.values():
        words = s.definition.split()
        own = {w.lower() for lemma in s.lemmas for w in lemma.split()}
        if (s.pos in "nva" and len(words) >= 6 and definitions[s.definition] == 1 and len(s.lemmas) <= 4
                and not own & {w.strip(",;()").lower() for w in words}):
            found["define"].append(("define", f'Which {s.pos_name} means "{s.definition}"?',
                                    list(s.lemmas), s.definition, s.id))
        head = s.lemmas[0]
        if (s.pos == "n" and _WORD.match(head) and senses[head] == 1 and len(s.hypernyms) == 1
                and s.hypernyms[0] in synsets):
            article = "an" if head[0] in "aeiou" else "a"
            found["kind-of"].append(("kind-of", f"What is {article} {head} a kind of?",
                                     list(synsets[s.hypernyms[0]].lemmas), head, s.id))
        if s.pos in "as":
            for source, target, dest in s.antonyms:
                word = s.lemmas[source] if source < len(s.lemmas) else None
                other = synsets.get(target)
                if word and other and _WORD.match(word) and senses[word] == 1 and dest < len(other.lemmas):
                    found["opposite"].append(("opposite", f'What is the opposite of the adjective "{word}"?',
                                              [other.lemmas[dest]], word, s.id))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    synsets = read_synsets()
    index = open_index(resolve_corpus("wordnet"))
    rng = random.Random(args.seed)
    tasks = []
    for kind, pool in candidates(synsets).items():
        rng.shuffle(pool)
        kept = 0
        for _, question, answers, query, evidence in pool:
            if kept == COUNTS[kind]:
                break
            hits = [doc["id"] for doc in index.search(query, TOP_K)]
            text = normalize_answer(entry_text(synsets[evidence], synsets))
            if evidence not in hits or not all(normalize_answer(a) in text for a in answers):
                continue
            kept += 1
            tasks.append({"id": f"wordnet-{kind}-{kept:03d}", "mode": "rag", "tags": ["wordnet", kind],
                          "question": question, "answers": answers, "corpus": "wordnet",
                          "reference": {"queries": [query], "answer": answers[0]}, "evidence": [evidence]})
        if kept < COUNTS[kind]:
            raise SystemExit(f"only {kept} {kind} questions pass the checks; wanted {COUNTS[kind]}")
    args.out.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks))
    print(f"{len(tasks)} questions -> {args.out}")


if __name__ == "__main__":
    main()
