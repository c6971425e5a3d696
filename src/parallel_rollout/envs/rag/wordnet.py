"""WordNet 3.0 as a document collection: one dictionary entry per synset.

WordNet (Princeton's lexical database of English) ships in Debian's ``wordnet-base`` package
as the ``data.noun``, ``data.verb``, ``data.adj`` and ``data.adv`` files of
``/usr/share/wordnet`` (``$PARALLEL_ROLLOUT_WORDNET`` points elsewhere). A line of those files
is one synset (format: wndb(5WN))::

    02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 023 @ 02083346 n 0000 … | gloss

that is: offset, lexicographer file, part of speech, word count (hex), each word with its
lexical id, pointer count, pointers (symbol, target offset, target part of speech,
source/target word numbers in hex), then ``|`` and the gloss: definitions and quoted
examples separated by ``;``.

``documents()`` turns each synset into a short entry in plain English: its words, part of
speech, definition, examples, what it is a kind of (hypernyms) and, for words with one, their
opposite (antonyms). That text is the ``wordnet`` corpus the ``rag`` mode searches, and the
source of the shipped questions (``scripts/make_rag_questions.py``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

#: part of speech -> data file
DATA_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}
POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
#: the Debian package that ships the files
PACKAGE = "wordnet-base"

_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")


def wordnet_dir() -> Path:
    """Where the WordNet data files are."""
    return Path(os.environ.get("PARALLEL_ROLLOUT_WORDNET", "/usr/share/wordnet"))


def data_files(root: Path | None = None) -> list[Path]:
    """The four data files, in a fixed order; FileNotFoundError saying how to install them."""
    root = root or wordnet_dir()
    files = [root / name for name in DATA_FILES.values()]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(
            f"WordNet data files not found ({', '.join(missing)}): install Debian's {PACKAGE} "
            f"package (apt-get install {PACKAGE}) or set PARALLEL_ROLLOUT_WORDNET"
        )
    return files


@dataclass
class Synset:
    """One synset: its words and gloss, and its links to others (by synset id)."""

    id: str
    pos: str
    lemmas: list[str]
    definition: str
    examples: list[str]
    hypernyms: list[str] = field(default_factory=list)
    #: (this synset's word index, target synset id, target word index), 0-based
    antonyms: list[tuple[int, str, int]] = field(default_factory=list)

    @property
    def pos_name(self) -> str:
        """noun, verb, adjective or adverb."""
        return POS_NAMES[self.pos]


def synset_id(pos: str, offset: str) -> str:
    """The id of a synset: its file's part of speech and its offset (satellites are 'a')."""
    return f"{'a' if pos == 's' else pos}{offset}"


def _lemma(word: str) -> str:
    return _ADJ_MARKER.sub("", word).replace("_", " ")


def parse_line(line: str) -> Synset:
    """One data-file line as a Synset; ValueError when it is not one."""
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    offset, pos = fields[0], fields[2]
    count = int(fields[3], 16)
    words = [_lemma(fields[4 + 2 * i]) for i in range(count)]
    at = 4 + 2 * count
    pointers = int(fields[at])
    synset = Synset(id=synset_id(pos, offset), pos=pos, lemmas=words, definition="", examples=[])
    for i in range(pointers):
        symbol, target, target_pos, source_target = fields[at + 1 + 4 * i: at + 5 + 4 * i]
        if symbol in ("@", "@i"):
            synset.hypernyms.append(synset_id(target_pos, target))
        elif symbol == "!":
            source, dest = int(source_target[:2], 16), int(source_target[2:], 16)
            synset.antonyms.append((source - 1, synset_id(target_pos, target), dest - 1))
    definitions = []
    for part in gloss.strip().split("; "):
        part = part.strip()
        if part.startswith('"'):
            synset.examples.append(part.strip('"'))
        elif part:
            definitions.append(part)
    synset.definition = "; ".join(definitions)
    return synset


def read_synsets(root: Path | None = None) -> dict[str, Synset]:
    """Every synset of the four data files, by id."""
    synsets: dict[str, Synset] = {}
    for path in data_files(root):
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(" "):  # the licence header lines start with two spaces
                    continue
                synset = parse_line(line.rstrip("\n"))
                synsets[synset.id] = synset
    return synsets


def entry_text(synset: Synset, synsets: dict[str, Synset]) -> str:
    """The synset as a dictionary entry in plain text."""
    text = f"{', '.join(synset.lemmas)} ({synset.pos_name}): {synset.definition}."
    for example in synset.examples:
        text += f' Example: "{example}".'
    kinds = [", ".join(synsets[h].lemmas) for h in synset.hypernyms if h in synsets]
    if kinds:
        text += f" A kind of: {'; '.join(kinds)}."
    for source, target, dest in synset.antonyms:
        other = synsets.get(target)
        if other is not None and source < len(synset.lemmas) and dest < len(other.lemmas):
            text += f" Opposite of {synset.lemmas[source]}: {other.lemmas[dest]}."
    return text


def documents(root: Path | None = None) -> Iterator[dict[str, str]]:
    """The corpus: ``{"id", "title", "text"}`` per synset, in file order."""
    synsets = read_synsets(root)
    for synset in synsets.values():
        yield {"id": synset.id, "title": ", ".join(synset.lemmas), "text": entry_text(synset, synsets)}
