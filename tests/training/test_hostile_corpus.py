"""Corpus preparation on hostile input: it cleans, cuts and counts, and never crashes."""

import json
import random
import re
import time
import tracemalloc
from pathlib import Path
from typing import List

import pytest
import spacy
import srsly
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training import corpus
from spacy_elmo.training.corpus import MAX_DOCUMENT_CHARS, MAX_RUN_CHARS, CorpusStats, prepare_corpus, read_documents, read_lines

NO_SPLITS = dict(dev_fraction=0, test_fraction=0)
CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


def sentences(directory: Path) -> List[str]:
    """Every training sentence of a prepared corpus, read as strict UTF-8."""
    shards = sorted((directory / "train").glob("shard_*.txt"))
    return [line for shard in shards for line in shard.read_bytes().decode("utf-8").splitlines()]


def saved_stats(directory: Path) -> dict:
    """The stats.json of a prepared corpus."""
    return json.loads((directory / "stats.json").read_text(encoding="utf-8"))


def test_nul_and_control_characters_are_removed_and_counted(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"ab\x00cd ef .\n\x07bell \x1b[31m red .\ntab\there .\n")
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", **NO_SPLITS)
    assert sorted(sentences(tmp_path / "out")) == ["abcd ef .", "bell [ 31 m red .", "tab here ."]
    assert stats.control_characters_removed == 3 and stats.lines_with_invalid_utf8 == 0
    assert saved_stats(tmp_path / "out")["control_characters_removed"] == 3


def test_invalid_utf8_and_lone_surrogates_in_jsonl_become_replacement_characters(tmp_path: Path) -> None:
    lines = [b'{"text": "caf\xe9 au lait ."}', b'{"text": "bad \\ud800 surrogate ."}', b'{"text": "fine ."}']
    (tmp_path / "in.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    stats = prepare_corpus(tmp_path / "in.jsonl", tmp_path / "out", **NO_SPLITS)
    assert sorted(sentences(tmp_path / "out")) == ["bad \ufffd surrogate .", "caf \ufffd au lait .", "fine ."]
    assert stats.lines_with_invalid_utf8 == 2 == saved_stats(tmp_path / "out")["lines_with_invalid_utf8"]


def binary_junk(size: int, seed: int = 0) -> bytes:
    """`size` seeded random bytes."""
    return random.Random(seed).randbytes(size)


def test_binary_junk_gives_a_clean_corpus_with_exact_counts(tmp_path: Path) -> None:
    data = binary_junk(32 * 1024)
    (tmp_path / "junk.txt").write_bytes(data)
    stats = prepare_corpus(tmp_path / "junk.txt", tmp_path / "out", **NO_SPLITS)
    lines = data.removesuffix(b"\n").split(b"\n")
    invalid = sum(1 for line in lines if not _decodes(line))
    decoded = data.decode("utf-8", "replace")
    assert stats.lines_with_invalid_utf8 == invalid > 0
    assert stats.control_characters_removed == len(CONTROL.findall(decoded)) > 0
    assert stats.documents + stats.empty_documents_dropped == len(lines)
    written = sentences(tmp_path / "out")
    assert written and not any(CONTROL.search(line) for line in written)
    stored = saved_stats(tmp_path / "out")
    assert (stored["lines_with_invalid_utf8"], stored["control_characters_removed"]) == (invalid, stats.control_characters_removed)


def _decodes(data: bytes) -> bool:
    """Whether `data` is valid UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_binary_junk_as_jsonl_or_docbin_is_an_error_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "junk.jsonl").write_bytes(b'{"text": "fine ."}\n' + binary_junk(4096).replace(b"\n", b" "))
    with pytest.raises(ValueError, match=r"junk.jsonl line 2: not valid JSON"):
        prepare_corpus(tmp_path / "junk.jsonl", tmp_path / "out")
    (tmp_path / "junk.spacy").write_bytes(binary_junk(4096))
    with pytest.raises(ValueError, match=r"junk.spacy: not a readable .spacy DocBin"):
        prepare_corpus(tmp_path / "junk.spacy", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_folder_with_a_binary_file_keeps_the_text_of_the_others(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.bin.txt").write_bytes(b"\x00\x01\x02\n\xff\xfe\n")
    (tmp_path / "folder" / "b.txt").write_text("Good text here .\n", encoding="utf-8")
    stats = prepare_corpus(tmp_path / "folder", tmp_path / "out", **NO_SPLITS)
    assert "Good text here ." in sentences(tmp_path / "out")
    assert (stats.control_characters_removed, stats.lines_with_invalid_utf8, stats.empty_documents_dropped) == (3, 1, 1)


def test_a_50_mb_line_is_read_in_bounded_memory_and_cut_before_tokenizing(tmp_path: Path) -> None:
    line = " ".join(f"w{i}" for i in range(6_000_000))
    assert len(line) > 50_000_000
    (tmp_path / "huge.txt").write_text(line + "\nA short line .\n", encoding="utf-8")
    tracemalloc.start()
    documents = list(read_documents(tmp_path / "huge.txt", CorpusStats()))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [len(d) for d in documents] == [MAX_DOCUMENT_CHARS, len("A short line .")]
    assert peak < 4 * MAX_DOCUMENT_CHARS  # the whole line would take over 100 MB as bytes and str
    del documents
    limit = 1_000_000  # tokenizing the default 10 million characters takes 5 to 40 s, with the load
    start = time.perf_counter()
    stats = prepare_corpus(tmp_path / "huge.txt", tmp_path / "out", max_document_chars=limit, **NO_SPLITS)
    assert time.perf_counter() - start < 30
    assert (stats.documents_cut_for_length, stats.characters_cut_for_length) == (1, len(line) - limit)
    assert stats.tokens == len(line[:limit].split()) + len("A short line .".split())
    stored = saved_stats(tmp_path / "out")
    assert (stored["documents_cut_for_length"], stored["characters_cut_for_length"]) == (1, len(line) - limit)


def test_long_runs_without_whitespace_are_split_so_tokenizing_stays_fast(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("')" * 5_000 + " end .\n" + "x" * 250 + "\n", encoding="utf-8")
    start = time.perf_counter()
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", **NO_SPLITS)
    assert time.perf_counter() - start < 10  # unsplit, the first run alone takes over 20 s
    assert stats.long_runs_split == 2 == saved_stats(tmp_path / "out")["long_runs_split"]
    tokens = [token for line in sentences(tmp_path / "out") for token in line.split(" ")]
    assert max(len(t) for t in tokens) == MAX_RUN_CHARS and "x" * 50 in tokens and "end" in tokens


@pytest.mark.parametrize("read_bytes", [1, 2, 3, 5, 64])
def test_reading_in_chunks_gives_the_lines_and_cuts_of_reading_whole_lines(tmp_path: Path, monkeypatch, read_bytes: int) -> None:
    data = "héllo wörld\n€uro\n\n".encode("utf-8") + b"bad \xe2\x82 end\n\xf0\x9f\xa6\x99 llama\nno newline \xc3"
    (tmp_path / "in.txt").write_bytes(data)
    monkeypatch.setattr(corpus, "READ_BYTES", read_bytes)
    for max_chars in (1, 4, 100):
        whole = [line.decode("utf-8", "surrogateescape") for line in data.split(b"\n")]
        expected = [(line[:max_chars], max(len(line) - max_chars, 0)) for line in whole]
        assert list(read_lines(tmp_path / "in.txt", max_chars)) == expected


def test_jsonl_and_docbin_documents_are_cut_and_overlong_jsonl_lines_dropped(tmp_path: Path) -> None:
    srsly.write_jsonl(tmp_path / "in.jsonl", [{"text": "one two three four five six"}, {"text": "x " * 40}, {"text": "ok ."}])
    stats = prepare_corpus(tmp_path / "in.jsonl", tmp_path / "j", max_document_chars=10, **NO_SPLITS)
    assert sorted(sentences(tmp_path / "j")) == ["ok .", "one two th"]
    assert (stats.documents_cut_for_length, stats.characters_cut_for_length, stats.jsonl_lines_dropped_for_length) == (1, 17, 1)
    nlp = spacy.blank("en")
    DocBin(docs=[nlp("Delta epsilon zeta eta ."), nlp(""), nlp("Theta .")]).to_disk(tmp_path / "in.spacy")
    stats = prepare_corpus(tmp_path / "in.spacy", tmp_path / "s", max_document_chars=12, **NO_SPLITS)
    assert sorted(sentences(tmp_path / "s")) == ["Delta epsilo", "Theta ."]
    assert (stats.documents_cut_for_length, stats.characters_cut_for_length, stats.empty_documents_dropped) == (1, 12, 1)


def write_empty_inputs(root: Path) -> List[Path]:
    """An input of each format that holds no text: empty, whitespace, NULs, empty records."""
    (root / "empty.txt").write_bytes(b"")
    (root / "blank.txt").write_bytes(b" \n\t\n\r\n\x00\x00\x0b\n")
    (root / "folder").mkdir()
    (root / "folder" / "a.txt").write_bytes(b"\n\n")
    (root / "folder" / "b.txt").write_bytes(b"\x00")
    srsly.write_jsonl(root / "empty.jsonl", [{"text": ""}, {"text": " \u3000 "}])
    DocBin(docs=[spacy.blank("en")("   ")]).to_disk(root / "empty.spacy")
    return [root / name for name in ("empty.txt", "blank.txt", "folder", "empty.jsonl", "empty.spacy")]


def test_inputs_without_text_are_a_one_line_error_naming_them(tmp_path: Path) -> None:
    for path in write_empty_inputs(tmp_path):
        with pytest.raises(ValueError) as caught:
            prepare_corpus(path, tmp_path / "out")
        message = str(caught.value)
        assert message.startswith(f"{path}: nothing to train on") and "\n" not in message
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="blank.txt: nothing to train on, no text found \\(4 empty documents dropped, 2 control"):
        prepare_corpus(tmp_path / "blank.txt", tmp_path / "out")


def test_a_corpus_that_leaves_no_training_sentence_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("One sentence .\nAnother one .\n", encoding="utf-8")
    with pytest.raises(ValueError, match="in.txt: nothing to train on, all 2 sentences go to dev and test"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "out", dev_fraction=0.5, test_fraction=0.4)
    assert not (tmp_path / "out").exists()


def test_the_corpus_command_reports_the_cleaning_and_fails_cleanly_without_text(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"a\x00b c .\n\n" + b"y" * 300 + b"\n")
    result = CliRunner().invoke(app, ["corpus", str(tmp_path / "in.txt"), str(tmp_path / "out"), "--max-document-chars", "250"])
    assert result.exit_code == 0, result.output
    assert "1 control characters removed, 1 documents cut to 250 characters (50 cut), 1 long runs" in result.output
    assert "1 empty documents dropped" in result.output
    (tmp_path / "empty.txt").write_bytes(b"")
    result = CliRunner().invoke(app, ["corpus", str(tmp_path / "empty.txt"), str(tmp_path / "none")])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "nothing to train on" in " ".join(result.output.split()) and "Traceback" not in result.output
