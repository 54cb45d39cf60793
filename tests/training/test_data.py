"""Training batches: within budget, every sentence once per epoch, reproducible from any position."""

import itertools

import pytest
import torch

from elmo_testing import random_bilm, random_word_bilm
from spacy_elmo.batching import token_budget_batches
from spacy_elmo.nn.chars import token_to_char_ids
from spacy_elmo.nn.special_tokens import UNK_ID
from spacy_elmo.training.data import (
    BatchStream,
    DataPosition,
    Vocabulary,
    bucketed_batches,
    read_sentences,
    to_tensors,
    train_shards,
)


def test_vocabulary_reads_ids_and_refuses_bad_files(tmp_path):
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "the", "bank"])
    assert vocab.ids(["the", "bank", "river"]) == [3, 4, UNK_ID]
    vocab.to_file(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt").tokens == vocab.tokens
    (tmp_path / "bad.txt").write_text("the\n<S>\n</S>\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt: a vocabulary must start with"):
        Vocabulary.from_file(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["<S>", "</S>", "<UNK>", "a", "a"])
    with pytest.raises(ValueError, match="not found"):
        Vocabulary.from_file(tmp_path / "missing.txt")


def test_text_that_is_not_utf8_is_an_error_naming_the_file(tmp_path):
    latin1 = "<S>\n</S>\n<UNK>\ncaf\u00e9\n".encode("latin-1")
    (tmp_path / "vocab.txt").write_bytes(latin1)
    (tmp_path / "dev.txt").write_bytes(b"plain words\n" * 5000 + latin1)  # past the first block the reader decodes
    for read in (lambda: Vocabulary.from_file(tmp_path / "vocab.txt"), lambda: read_sentences(tmp_path / "dev.txt", 10)):
        with pytest.raises(ValueError, match=f"^{tmp_path}/(vocab|dev).txt: not UTF-8 text \\(invalid continuation byte\\)$"):
            read()


def test_long_sentences_are_cut_and_blank_lines_skipped(tmp_path):
    (tmp_path / "s.txt").write_text("a b c d e f g\n\nh i\n", encoding="utf-8")
    assert read_sentences(tmp_path / "s.txt", 3) == [["a", "b", "c"], ["d", "e", "f"], ["g"], ["h", "i"]]


def test_token_budget_batches_of_sentences_stay_within_the_padded_budget():
    sentences = [[str(i)] * (1 + i % 9) for i in range(100)]
    batches = list(token_budget_batches(sentences, 20, length=len))
    assert sum(len(b) for b in batches) == 100
    assert all(len(b) * len(b[0]) <= 20 for b in batches)
    assert [len(s) for b in batches for s in b] == sorted((len(s) for s in sentences), reverse=True)


def test_bucketed_batches_keep_every_sentence_and_follow_the_seed():
    sentences = [[f"w{i}"] * (1 + i % 13) for i in range(500)]
    first = bucketed_batches(sentences, 64, 3, torch.Generator().manual_seed(1))
    again = bucketed_batches(sentences, 64, 3, torch.Generator().manual_seed(1))
    other = bucketed_batches(sentences, 64, 3, torch.Generator().manual_seed(2))
    assert first == again and first != other
    assert sorted(s[0] for b in first for s in b) == sorted(s[0] for s in sentences)
    assert all(len(b) * max(map(len, b)) <= 64 for b in first)
    # bucketing: rows of a batch have similar lengths
    spread = sum(max(map(len, b)) - min(map(len, b)) for b in first) / len(first)
    assert spread < 3


def test_a_stream_resumed_at_a_position_continues_identically(toy_corpus):
    shards = train_shards(toy_corpus)
    assert len(shards) >= 2
    stream = BatchStream(shards, 64, 20, 2, seed=5)
    run = list(itertools.islice(stream, 25))
    positions = []
    stream = BatchStream(shards, 64, 20, 2, seed=5)
    for _ in range(11):
        next(stream)
        positions.append(stream.position)
    resumed = BatchStream(shards, 64, 20, 2, seed=5, position=positions[-1])
    assert list(itertools.islice(resumed, 14)) == run[11:]


def test_each_epoch_sees_every_training_sentence_once_in_a_new_order(toy_corpus):
    shards = train_shards(toy_corpus)
    expected = sorted(line for shard in shards for line in shard.read_text(encoding="utf-8").splitlines())
    stream = BatchStream(shards, 64, 100, 2, seed=0)
    epochs = {0: [], 1: []}
    while stream.upcoming_epoch() < 2:
        epoch = stream.upcoming_epoch()
        epochs[epoch].append(next(stream))
    for epoch in (0, 1):
        assert sorted(" ".join(s) for b in epochs[epoch] for s in b) == expected
    assert epochs[0] != epochs[1]
    assert stream.position == DataPosition(2, 0, 0)


def test_to_tensors_pads_token_ids_and_counts_predictions():
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b"])
    batch = to_tensors([["a", "b", "zz"], ["b"]], vocab, random_bilm())
    assert batch.input_ids.shape == (2, 3, 50)
    assert batch.lengths.tolist() == [3, 1]
    assert batch.token_ids.tolist() == [[3, 4, UNK_ID], [4, UNK_ID, UNK_ID]]
    assert int(batch.input_ids[1, 1:].abs().sum()) == 0
    assert batch.input_ids[0, 2].tolist() == token_to_char_ids("zz").tolist()


def test_to_tensors_gives_a_word_model_its_own_word_ids():
    """A word model reads its table's ids, which may differ from the softmax's vocabulary."""
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b"])
    bilm = random_word_bilm(["<S>", "</S>", "<UNK>", "b", "zz"])
    batch = to_tensors([["a", "b", "zz"], ["b"]], vocab, bilm)
    assert batch.input_ids.tolist() == [[UNK_ID, 3, 4], [3, 0, 0]]
    assert batch.token_ids.tolist() == [[3, 4, UNK_ID], [4, UNK_ID, UNK_ID]]


def test_empty_shards_are_stepped_over_across_epochs(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "shard_00000.txt").write_text("a b c\nd e\n", encoding="utf-8")
    (tmp_path / "train" / "shard_00001.txt").write_text("\n\n", encoding="utf-8")
    stream = BatchStream(train_shards(tmp_path), 64, 10, 1, seed=0)
    seen = [sorted(" ".join(s) for s in next(stream)) for _ in range(6)]
    assert all(batch == ["a b c", "d e"] for batch in seen)
    assert stream.upcoming_epoch() == 6
    (tmp_path / "train" / "shard_00000.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="hold no sentences"):
        next(BatchStream(train_shards(tmp_path), 64, 10, 1, seed=0))
