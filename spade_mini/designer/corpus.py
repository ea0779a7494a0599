"""Grounding documents for the designer (the "corpus" part of SPADE).

SPADE grounds each designer call on one document sampled uniformly from a large pretraining
corpus; the environment should borrow its theme and facts from the document without mentioning
it. This module gives the designer a `Document` from one of three sources:

- the bundled default corpus (`corpus_data/documents.jsonl`): 100+ short documents across
  science, mathematics, history, everyday procedures, software/APIs, economics, geography and
  games. The text was written fresh for spade_mini and is dedicated to the public domain
  (CC0 1.0), so it can be shipped and reused freely;
- a user path: a JSONL file (`orig_doc` or `text` field, `orig_doc` wins, bad lines skipped and
  counted) or a directory of `.txt` files, one document per file;
- a Hugging Face `datasets` name (`hf:<name>`), streamed; only the first `HF_DOCS` documents
  are kept, because uniform sampling from an endless stream needs the whole stream.

Documents are truncated to `max_words` whitespace words at sampling time. Omitted: the
reference's metadata keys (kept there, never shown) and its process-wide seeded singleton RNG;
the caller passes its own `random.Random`, so sampling is reproducible per run.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

BUNDLED_PATH = Path(__file__).parent / "corpus_data" / "documents.jsonl"
HF_DOCS = 2000  # streamed documents kept from a `datasets` corpus
DEFAULT_MAX_WORDS = 1000  # a 135M model with an 8k context cannot read the reference's 6000
_WORD = re.compile(r"\S+")


class CorpusError(ValueError):
    """A corpus that cannot be loaded; the message is one sentence naming the fix."""


@dataclass
class Document:
    text: str
    source: str  # "bundled", a file path, or "hf:<name>"
    id: str


def truncate_words(text: str, max_words: int) -> str:
    """Cut `text` after `max_words` words, keeping its original whitespace, and say so."""
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == max_words:
            rest = text[match.end():]
            if rest.strip():
                return text[: match.end()] + f"\n[Document truncated at ~{max_words} words]"
            break
    return text


class Corpus:
    """A list of documents to sample from; build one with `Corpus.load`."""

    def __init__(self, documents: list[Document], max_words: int = DEFAULT_MAX_WORDS,
                 skipped: int = 0):
        if not documents:
            raise CorpusError("The corpus has no usable documents; give a JSONL file with a "
                              "`text` field, a folder of .txt files, or use the default corpus.")
        self.documents = documents
        self.max_words = max_words
        self.skipped = skipped  # lines dropped while loading (bad JSON, no text)

    def __len__(self) -> int:
        return len(self.documents)

    def sample(self, rng: random.Random) -> Document:
        doc = self.documents[rng.randrange(len(self.documents))]
        return Document(truncate_words(doc.text, self.max_words), doc.source, doc.id)

    @classmethod
    def load(cls, spec: str | None, max_words: int = DEFAULT_MAX_WORDS) -> "Corpus":
        """None/"default" -> bundled corpus; "hf:<name>" -> `datasets`; otherwise a path."""
        if spec is None or spec == "default":
            docs, skipped = read_jsonl(BUNDLED_PATH, source="bundled")
            return cls(docs, max_words, skipped)
        if spec.startswith("hf:"):
            return cls(read_hf(spec[3:]), max_words)
        path = Path(spec).expanduser()
        if path.is_dir():
            return cls(read_txt_dir(path), max_words)
        if path.is_file():
            docs, skipped = read_jsonl(path, source=str(path))
            return cls(docs, max_words, skipped)
        raise CorpusError(f"Corpus path {spec!r} does not exist; pass an existing JSONL file or "
                          "folder of .txt files, 'default', 'hf:<dataset>', or use --no-corpus.")


def read_jsonl(path: Path, source: str) -> tuple[list[Document], int]:
    """Documents from a JSONL file, and how many lines were skipped."""
    docs, skipped = [], 0
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            text = _row_text(row)
            if text is None:
                skipped += 1
                continue
            doc_id = row.get("id")
            doc_id = str(doc_id) if doc_id is not None else f"{path.stem}:{line_no}"
            docs.append(Document(text, source, doc_id))
    return docs, skipped


def _row_text(row: object) -> str | None:
    # orig_doc wins over text, as in the reference corpus loader
    if not isinstance(row, dict):
        return None
    for key in ("orig_doc", "text"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def read_txt_dir(path: Path) -> list[Document]:
    docs = []
    for file in sorted(path.glob("*.txt")):
        text = file.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            docs.append(Document(text, str(file), file.stem))
    return docs


def read_hf(name: str, limit: int = HF_DOCS) -> list[Document]:
    """Stream the first `limit` documents of a Hugging Face dataset's train split."""
    try:
        import datasets  # optional: only needed for hf: corpora
    except ImportError:
        raise CorpusError("The `datasets` package is missing; run `pip install datasets`, or "
                          "pass a local JSONL file with --corpus.") from None
    try:
        stream = datasets.load_dataset(name, split="train", streaming=True)
        docs = []
        for index, row in enumerate(stream):
            if len(docs) >= limit:
                break
            text = _row_text(row)
            if text is not None:
                docs.append(Document(text, f"hf:{name}", f"{name}:{index}"))
    except (OSError, ConnectionError, ValueError) as err:
        # covers no network, unknown dataset names and missing splits
        raise CorpusError(f"Could not stream the dataset {name!r} ({type(err).__name__}); check "
                          "the name and network, or pass a local JSONL file with --corpus.") from None
    return docs
