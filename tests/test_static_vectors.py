"""scripts/static_vectors.py: skipgram vectors trained by floret on tokenized text, written as
a spaCy pipeline with vectors."""

import importlib.util
import json
import subprocess
import sys

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from elmo_testing import REPO, plain

SCRIPT = REPO / "scripts" / "static_vectors.py"
TEXT = "the cat sat on the mat .\nthe dog sat on the log .\na cat and a dog met on the mat .\n"


def make_vectors(output, *texts, options=("--dim", "6", "--epochs", "2", "--min-count", "2")):
    command = [sys.executable, str(SCRIPT), str(output), *map(str, texts), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_the_pipeline_has_a_vector_for_each_word_used_min_count_times_and_one_thread_repeats_itself(tmp_path):
    pytest.importorskip("floret")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "shards" / "b.txt").write_text("the cat met the dog .\n", encoding="utf-8")
    (tmp_path / "more.txt").write_text("a mat , a log .\n", encoding="utf-8")
    for name in ("first", "again"):
        result = make_vectors(tmp_path / name, tmp_path / "shards", tmp_path / "more.txt")
        assert result.returncode == 0, result.stderr
    first, again = (spacy.load(tmp_path / name).vocab for name in ("first", "again"))
    words = " ".join([TEXT, "the cat met the dog .", "a mat , a log ."]).split()
    expected = {word for word in words if words.count(word) >= 2}
    assert {first.strings[key] for key in first.vectors.keys()} == expected
    assert first.vectors.shape == (len(expected), 6)
    assert numpy.array_equal(first.vectors.data, again.vectors.data)
    assert first["cat"].has_vector and not first["and"].has_vector  # "and" is used once
    stats = json.loads((tmp_path / "first" / "static-vectors.json").read_text())
    assert stats["tokens"] == len(words) and stats["words_with_vectors"] == len(expected)
    assert stats["texts"] == [str(tmp_path / "shards" / "a.txt"), str(tmp_path / "shards" / "b.txt"), str(tmp_path / "more.txt")]


def test_a_word_holding_a_unicode_line_separator_keeps_its_vector(tmp_path):
    """fastText breaks words at ASCII whitespace only: U+2028 and \\x1c stay inside a word."""
    pytest.importorskip("floret")
    odd = ["foo\u2028bar", "a\x1cb"]
    (tmp_path / "text.txt").write_text((f"the {odd[0]} sat on {odd[1]} .\n") * 3, encoding="utf-8")
    result = make_vectors(tmp_path / "out", tmp_path / "text.txt")
    assert result.returncode == 0, result.stderr
    vocab = spacy.load(tmp_path / "out").vocab
    assert {vocab.strings[key] for key in vocab.vectors.keys()} == {"the", "sat", "on", ".", *odd}


@pytest.mark.parametrize(
    "make_text, message",
    [
        (lambda path: path / "missing.txt", "missing.txt not found"),
        (lambda path: (path / "empty-folder").mkdir() or path / "empty-folder", "holds no .txt files"),
        (lambda path: (path / "blank.txt").write_text("\n \n") and path / "blank.txt", "no tokens in"),
        (lambda path: (path / "latin1.txt").write_bytes(b"caf\xe9 sat .\n") and path / "latin1.txt", "latin1.txt: not UTF-8 text (byte 3"),
    ],
)
def test_text_it_cannot_train_on_is_refused_before_anything_is_written(tmp_path, make_text, message):
    pytest.importorskip("floret")
    result = make_vectors(tmp_path / "out", make_text(tmp_path))
    assert result.returncode != 0 and message in plain(result.stderr)
    assert not (tmp_path / "out").exists()


def test_without_floret_it_names_the_extra_to_install(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("static_vectors_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "floret", None)  # import floret raises ImportError
    (tmp_path / "text.txt").write_text(TEXT)
    result = CliRunner().invoke(module.app, [str(tmp_path / "out"), str(tmp_path / "text.txt")])
    assert result.exit_code != 0 and "pip install 'spacy-elmo[vectors]'" in plain(result.output)


def test_an_output_folder_of_other_files_is_refused_before_training_and_its_own_is_replaced(tmp_path):
    pytest.importorskip("floret")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    result = make_vectors(tmp_path / "notes", tmp_path / "text.txt")
    assert result.returncode != 0 and "neither empty nor a pipeline with vectors this script wrote" in plain(result.stderr)
    assert [entry.name for entry in (tmp_path / "notes").iterdir()] == ["mine.txt"]
    assert "Progress" not in result.stdout + result.stderr  # refused before floret trained

    assert make_vectors(tmp_path / "out", tmp_path / "text.txt").returncode == 0
    wider = make_vectors(tmp_path / "out", tmp_path / "text.txt", options=("--dim", "9", "--epochs", "1", "--min-count", "2"))
    assert wider.returncode == 0, wider.stderr
    assert spacy.load(tmp_path / "out").vocab.vectors.shape[1] == 9


@pytest.mark.parametrize(
    "options, message",
    [
        (("--min-count", "50"), "no word of the text is used --min-count 50 times or more: lower it"),
        (("--lang", "xx-nonsense"), "xx-nonsense"),
    ],
)
def test_settings_it_cannot_train_with_are_refused_and_nothing_is_written(tmp_path, options, message):
    pytest.importorskip("floret")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    result = make_vectors(tmp_path / "out", tmp_path / "text.txt", options=("--dim", "4", *options))
    assert result.returncode != 0 and message in plain(result.stderr)
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    assert [entry.name for entry in tmp_path.iterdir()] == ["text.txt"]  # no staging folder left beside it
