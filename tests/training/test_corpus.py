"""Corpus preparation: deterministic, and sane on empty lines, bad bytes, long lines, duplicates."""

import json
from collections import Counter

import pytest
import spacy
import srsly
from spacy.tokens import DocBin

from spacy_elmo.nn.special_tokens import SPECIAL_TOKENS
from spacy_elmo.training.corpus import build_vocab, prepare_corpus

TEXT = (
    "The bank of the river was steep. We sat on it.\n"
    "\n"
    "   \n"
    "She took cash from the bank. The bank was closed!\n"
    "The bank of the river was steep.\n"
    "Dogs bark. Trees have bark too.\n"
)


def read_output(directory):
    shards = sorted((directory / "train").glob("shard_*.txt"))
    train = [line for shard in shards for line in shard.read_text(encoding="utf-8").splitlines()]
    dev = (directory / "dev.txt").read_text(encoding="utf-8").splitlines()
    test = (directory / "test.txt").read_text(encoding="utf-8").splitlines()
    return train, dev, test


def test_preparation_is_deterministic_and_splits_cover_every_sentence_once(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "a", seed=3, dev_fraction=0.2, test_fraction=0.2, sentences_per_shard=2)
    prepare_corpus(tmp_path / "in.txt", tmp_path / "b", seed=3, dev_fraction=0.2, test_fraction=0.2, sentences_per_shard=2)
    for name in ("dev.txt", "test.txt", "vocab.txt", "train/shard_00000.txt", "stats.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    train, dev, test = read_output(tmp_path / "a")
    expected = {
        "The bank of the river was steep .",
        "We sat on it .",
        "She took cash from the bank .",
        "The bank was closed !",
        "Dogs bark .",
        "Trees have bark too .",
    }
    assert sorted(train + dev + test) == sorted(expected)
    assert len(dev) == len(test) == 1
    assert stats.documents == 4 and stats.sentences == 7 and stats.duplicate_sentences == 1
    assert len(list((tmp_path / "a" / "train").glob("shard_*.txt"))) == 2
    other = prepare_corpus(tmp_path / "in.txt", tmp_path / "c", seed=4, dev_fraction=0.2, test_fraction=0.2)
    assert other.train_sentences == stats.train_sentences
    assert json.loads((tmp_path / "a" / "stats.json").read_text())["duplicate_sentences"] == 1


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    (tmp_path / "in.txt").write_bytes(b"caf\xe9 au lait .\nfine line .\n\xff\xfe broken .\n")
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", dev_fraction=0, test_fraction=0)
    train, _, _ = read_output(tmp_path / "out")
    assert stats.lines_with_invalid_utf8 == 2
    assert any("\ufffd" in line for line in train)
    assert "fine line ." in train


def test_very_long_lines_are_tokenized_in_pieces(tmp_path):
    words = ["word%d" % (i % 50) for i in range(400_000)]
    (tmp_path / "in.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", dev_fraction=0, test_fraction=0)
    train, _, _ = read_output(tmp_path / "out")
    assert stats.documents == 1
    assert sum(len(line.split(" ")) for line in train) == len(words) == stats.tokens
    assert len(train) > 1  # cut into pieces under spaCy's max_length


def test_a_long_document_without_spaces_is_cut_at_its_newlines_not_inside_a_word(tmp_path):
    words = ["word%d" % (i % 50) for i in range(60_000)]
    srsly.write_jsonl(tmp_path / "in.jsonl", [{"text": "\n".join(words)}])
    stats = prepare_corpus(tmp_path / "in.jsonl", tmp_path / "out", dev_fraction=0, test_fraction=0)
    train, _, _ = read_output(tmp_path / "out")
    assert sorted(token for line in train for token in line.split(" ")) == sorted(words) and stats.tokens == len(words)


def test_jsonl_folder_and_docbin_inputs(tmp_path):
    srsly.write_jsonl(tmp_path / "in.jsonl", [{"text": "One two three ."}, {"text": "  "}, {"text": "Four ."}])
    assert prepare_corpus(tmp_path / "in.jsonl", tmp_path / "j", dev_fraction=0, test_fraction=0).sentences == 2
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("Alpha beta .\n")
    (tmp_path / "folder" / "b.txt").write_text("Gamma .\n")
    assert prepare_corpus(tmp_path / "folder", tmp_path / "f", dev_fraction=0, test_fraction=0).documents == 2
    nlp = spacy.blank("en")
    DocBin(docs=[nlp("Delta epsilon ."), nlp("Zeta .")]).to_disk(tmp_path / "in.spacy")
    assert prepare_corpus(tmp_path / "in.spacy", tmp_path / "s", dev_fraction=0, test_fraction=0).sentences == 2
    srsly.write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    with pytest.raises(ValueError, match="bad.jsonl line 1: expected an object with a string 'text'"):
        prepare_corpus(tmp_path / "bad.jsonl", tmp_path / "x")


def test_empty_or_missing_input_is_an_error(tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match="no text found"):
        prepare_corpus(tmp_path / "empty.txt", tmp_path / "out")
    with pytest.raises(ValueError, match="input not found"):
        prepare_corpus(tmp_path / "missing.txt", tmp_path / "out")


def test_an_unknown_language_or_an_output_inside_a_folder_input_is_a_clear_error(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    with pytest.raises(ValueError, match="--lang 'zz': spaCy cannot make this language's tokenizer here"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "out", lang="zz")
    with pytest.raises(ValueError, match="the output lies inside .*, which this command reads; give another output path"):
        prepare_corpus(tmp_path, tmp_path / "prepared")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]  # nothing written


def test_an_output_folder_holding_the_text_or_the_vocabulary_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "test.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "adapt").mkdir()
    (tmp_path / "adapt" / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the output holds .*test.txt, which this command reads"):
        prepare_corpus(tmp_path / "out" / "test.txt", tmp_path / "out")
    with pytest.raises(ValueError, match="the output holds .*vocab.txt, which this command reads"):
        prepare_corpus(tmp_path / "out" / "test.txt", tmp_path / "adapt", vocab_path=tmp_path / "adapt" / "vocab.txt")
    assert (tmp_path / "out" / "test.txt").read_text(encoding="utf-8") == TEXT
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["test.txt"]
    assert sorted(path.name for path in (tmp_path / "adapt").iterdir()) == ["vocab.txt"]


@pytest.mark.parametrize("n_lines, dev_fraction, n_dev", [(5, 0.1, 1), (25, 0.1, 3), (15, 0.1, 2), (14, 0.1, 1), (4, 0.1, 0)])
def test_held_out_shares_round_half_up(tmp_path, n_lines, dev_fraction, n_dev):
    (tmp_path / "in.txt").write_text("".join(f"Sentence number {i} .\n" for i in range(n_lines)), encoding="utf-8")
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", dev_fraction=dev_fraction, test_fraction=0.0)
    assert (stats.dev_sentences, stats.train_sentences) == (n_dev, n_lines - n_dev)


def test_vocabulary_order_min_count_and_size():
    lines = ["a b b c", "b c <S> d", "c c"]
    assert build_vocab(lines) == [*SPECIAL_TOKENS, "c", "b", "a", "d"]
    assert build_vocab(lines, min_count=2) == [*SPECIAL_TOKENS, "c", "b"]
    assert build_vocab(lines, max_size=4) == [*SPECIAL_TOKENS, "c"]


def test_corpus_command(tmp_path):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    result = CliRunner().invoke(app, ["corpus", str(tmp_path / "in.txt"), str(tmp_path / "out"), "--dev-fraction", "0.2", "--test-fraction", "0.2"])
    assert result.exit_code == 0, result.output
    assert "1 duplicates dropped" in result.output
    assert (tmp_path / "out" / "vocab.txt").read_text().splitlines()[:4] == [*SPECIAL_TOKENS, "."]
    assert "warning" not in result.output
    small = CliRunner().invoke(app, ["corpus", str(tmp_path / "in.txt"), str(tmp_path / "small"), "--test-fraction", "0.05"])
    assert small.exit_code == 0, small.output
    assert "warning: the dev split is empty (0.01 of 6 sentences rounds to 0)" in small.output
    assert "warning: the test split is empty (0.05 of 6 sentences rounds to 0)" in small.output


def train_counts(directory):
    train, _, _ = read_output(directory)
    return Counter(token for line in train for token in line.split(" "))


def test_a_given_vocabulary_is_used_as_it_is_or_ranked_by_the_new_texts_counts(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    given = [*SPECIAL_TOKENS, "zebra", "river", "apple", "bank"]
    (tmp_path / "vocab.txt").write_text("\n".join(given) + "\n", encoding="utf-8")
    everything = {"dev_fraction": 0.0, "test_fraction": 0.0, "vocab_path": tmp_path / "vocab.txt"}
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", **everything)
    assert (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines() == given
    assert stats.vocab_size == len(given)
    prepare_corpus(tmp_path / "in.txt", tmp_path / "ranked", **everything, rank_vocab=True)
    counts = train_counts(tmp_path / "ranked")
    assert counts["bank"] > counts["river"] > counts["zebra"] == counts["apple"] == 0
    ranked = (tmp_path / "ranked" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert ranked == [*SPECIAL_TOKENS, "bank", "river", "zebra", "apple"]  # words the text lacks keep their order
    assert ranked == [*SPECIAL_TOKENS, *sorted(given[3:], key=lambda t: (-counts[t], given.index(t)))]
    with pytest.raises(ValueError, match="leave them out"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "other", vocab_path=tmp_path / "vocab.txt", max_vocab=10)
    with pytest.raises(ValueError, match="rank_vocab ranks a given vocabulary"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "other", rank_vocab=True)
    (tmp_path / "bad.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt: a vocabulary must start with"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "other", vocab_path=tmp_path / "bad.txt")


def test_an_extended_vocabulary_appends_the_frequent_training_tokens_or_ranks_all_by_their_counts(tmp_path):
    (tmp_path / "in.txt").write_text(TEXT, encoding="utf-8")
    given = [*SPECIAL_TOKENS, "river", "zebra", "bank"]
    (tmp_path / "vocab.txt").write_text("\n".join(given) + "\n", encoding="utf-8")
    everything = {"dev_fraction": 0.0, "test_fraction": 0.0, "min_count": 2, "vocab_path": tmp_path / "vocab.txt", "extend_vocab": True}
    stats = prepare_corpus(tmp_path / "in.txt", tmp_path / "out", **everything)
    counts = train_counts(tmp_path / "out")
    added = sorted((t for t, n in counts.items() if n >= 2 and t not in given), key=lambda t: (-counts[t], t))
    assert added and any(n == 1 for n in counts.values())  # the text has words to add and words too rare to add
    assert (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").splitlines() == given + added
    assert stats.vocab_size == len(given) + len(added)
    prepare_corpus(tmp_path / "in.txt", tmp_path / "ranked", **everything, rank_vocab=True)
    assert any(counts[t] > counts["river"] for t in added)  # an added word outranks a given one
    order = {t: (0, given.index(t)) if t in given else (1, t) for t in given[3:] + added}
    expected = [*SPECIAL_TOKENS, *sorted(order, key=lambda t: (-counts[t], order[t]))]
    assert (tmp_path / "ranked" / "vocab.txt").read_text(encoding="utf-8").splitlines() == expected
    assert expected[-1] == "zebra"
    with pytest.raises(ValueError, match="extends a given vocabulary"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "other", extend_vocab=True)
    with pytest.raises(ValueError, match="min_count applies when extending"):
        prepare_corpus(tmp_path / "in.txt", tmp_path / "other", vocab_path=tmp_path / "vocab.txt", min_count=2)
