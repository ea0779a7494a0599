"""The corpus: bundled documents, sampling, truncation, user files and clear errors."""
import json
import random
import sys

import pytest

from spade_mini.designer.corpus import BUNDLED_PATH, Corpus, CorpusError, truncate_words


def bundled_rows():
    return [json.loads(line) for line in BUNDLED_PATH.read_text(encoding="utf-8").splitlines()]


def test_bundled_corpus_is_large_varied_and_short():
    rows = bundled_rows()
    assert len(rows) >= 100
    assert len({row["domain"] for row in rows}) >= 8
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert 80 <= len(row["text"].split()) <= 200, row["id"]
    assert len(Corpus.load(None)) == len(rows) == len(Corpus.load("default"))


def test_sampling_is_deterministic_for_a_seed():
    corpus = Corpus.load(None)
    ids = [[corpus.sample(random.Random(seed)).id for _ in range(1)] for seed in (3, 3)]
    assert ids[0] == ids[1]
    first, second = random.Random(5), random.Random(5)
    assert [corpus.sample(first).id for _ in range(10)] == [corpus.sample(second).id for _ in range(10)]
    other = random.Random(6)
    assert len({corpus.sample(other).id for _ in range(30)}) > 10  # uniform, not stuck


def test_sampling_truncates_to_max_words():
    doc = Corpus.load(None, max_words=20).sample(random.Random(0))
    assert doc.text.endswith("[Document truncated at ~20 words]")
    assert len(doc.text.split()) == 20 + len("[Document truncated at ~20 words]".split())
    assert doc.source == "bundled"


def test_truncate_keeps_short_text_and_whitespace():
    assert truncate_words("one two\nthree", 3) == "one two\nthree"
    assert truncate_words("one two\nthree four", 3) == "one two\nthree\n[Document truncated at ~3 words]"


def test_jsonl_loading_skips_bad_lines_and_prefers_orig_doc(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": "plain text doc"}),
             json.dumps({"orig_doc": "original wins", "text": "loses", "id": "x7"}),
             "{not json", json.dumps({"foo": 1}), json.dumps({"text": "   "}), json.dumps([1, 2]), ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = Corpus.load(str(path), max_words=50)
    assert [d.text for d in corpus.documents] == ["plain text doc", "original wins"]
    assert [d.id for d in corpus.documents] == ["docs:1", "x7"]
    assert corpus.skipped == 4
    assert corpus.documents[0].source == str(path)


def test_txt_directory_loading(tmp_path):
    (tmp_path / "b.txt").write_text("second file", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first file", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "notes.md").write_text("not a txt file", encoding="utf-8")
    corpus = Corpus.load(str(tmp_path))
    assert [(d.id, d.text) for d in corpus.documents] == [("a", "first file"), ("b", "second file")]


def test_missing_file_is_one_clear_sentence(tmp_path):
    with pytest.raises(CorpusError, match="does not exist.*--no-corpus") as info:
        Corpus.load(str(tmp_path / "nope.jsonl"))
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_empty_corpus_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text('{"title": "no text"}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match="no usable documents"):
        Corpus.load(str(path))


def test_hf_without_datasets_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(CorpusError, match="pip install datasets"):
        Corpus.load("hf:some/corpus")
