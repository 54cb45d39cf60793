"""The cached fast path equals the plain exact forward, with the cache on, off and evicting."""

import random

import pytest
import torch

from elmo_testing import random_bilm
from spacy_elmo.nn import batch_to_char_ids
from spacy_elmo.nn import embedder as embedder_module
from spacy_elmo.nn.embedder import Embedder

VOCAB = "the bank river of a money 🏦 銀行 x".split() + ["y" * 70, "naïve", "\x00ctl", "Bank", "BANK"]


def random_sentences(n: int, seed: int):
    rng = random.Random(seed)
    return [[rng.choice(VOCAB) for _ in range(rng.randint(1, 25))] for _ in range(n)]


def plain(bilm, sentences):
    with torch.no_grad():
        return bilm(torch.from_numpy(batch_to_char_ids(sentences)), [len(s) for s in sentences]).layers


@pytest.mark.parametrize("cache_size", [0, 4, 10_000])
@pytest.mark.parametrize("batch_size", [1, 7, 32])
def test_fast_path_equals_plain_forward(cache_size, batch_size):
    bilm = random_bilm()
    embedder = Embedder(bilm, cache_size=cache_size)
    sentences = random_sentences(40, seed=batch_size)
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        fast = embedder(batch).layers
        torch.testing.assert_close(fast, plain(bilm, batch), rtol=0, atol=1e-5)
    assert embedder.cached_tokens <= cache_size


def test_cache_is_least_recently_used_and_bounded():
    bilm = random_bilm()
    embedder = Embedder(bilm, cache_size=3)
    embedder([["a", "b", "c"]])
    embedder([["a"]])  # a becomes the most recent
    embedder([["d"]])  # evicts b, the least recent
    assert list(embedder._slots) == ["c", "a", "d"]
    embedder([["e", "f", "g", "h", "i"]])  # more new strings than the cache holds
    assert list(embedder._slots) == ["g", "h", "i"]
    before = embedder.encode_types(["g", "h", "i", "b"])
    with torch.no_grad():
        expected = bilm.token_encoder(torch.from_numpy(batch_to_char_ids([["g", "h", "i", "b"]]))[0])
    torch.testing.assert_close(before, expected, rtol=0, atol=1e-5)


def test_the_cache_table_grows_as_it_fills_and_keeps_what_it_held(monkeypatch):
    monkeypatch.setattr(embedder_module, "FIRST_CACHE_ROWS", 2)
    bilm = random_bilm()
    embedder = Embedder(bilm, cache_size=10**15)  # would be petabytes allocated at once
    strings = [f"w{i}" for i in range(11)]
    for start in range(0, len(strings), 3):
        embedder([strings[start : start + 3]])
    assert embedder.cached_tokens == 11 and embedder._table.shape[0] == 12  # 3 rows, then twice as many: 6, 12
    with torch.no_grad():
        expected = bilm.token_encoder(torch.from_numpy(batch_to_char_ids([strings]))[0])
    torch.testing.assert_close(embedder.encode_types(strings), expected, rtol=0, atol=1e-5)  # every one a hit
    small = Embedder(bilm, cache_size=5)
    small([strings[:3]])
    small([strings[3:9]])
    assert small._table.shape[0] == 5 and list(small._slots) == strings[4:9]


def test_cached_vectors_are_not_recomputed(monkeypatch):
    bilm = random_bilm()
    embedder = Embedder(bilm, cache_size=100)
    embedder([["the", "bank"], ["the", "river"]])
    seen = []
    original = bilm.token_encoder.forward

    def counting(char_ids):
        seen.append(char_ids.shape[0])
        return original(char_ids)

    monkeypatch.setattr(bilm.token_encoder, "forward", counting)
    embedder([["the", "bank", "of", "the", "river"]])
    assert seen == [1]  # only "of" is new


def test_negative_cache_size_is_rejected():
    with pytest.raises(ValueError, match="cache_size"):
        Embedder(random_bilm(), cache_size=-1)


def test_clear_forgets_weights_that_changed():
    bilm = random_bilm()
    embedder = Embedder(bilm)
    embedder([["bank"]])
    with torch.no_grad():
        bilm.token_encoder.char_embedding.weight.mul_(2.0)
    embedder.clear()
    torch.testing.assert_close(embedder([["bank"]]).layers, plain(bilm, [["bank"]]), rtol=0, atol=1e-5)


def test_pickled_embedder_gives_the_same_vectors_with_an_empty_cache():
    """What spawned worker processes receive: the model and settings, not the lock or cache."""
    import pickle

    embedder = Embedder(random_bilm(), cache_size=8)
    sentences = random_sentences(6, seed=3)
    expected = embedder(sentences).layers
    copy = pickle.loads(pickle.dumps(embedder))
    assert copy.cached_tokens == 0 and copy.cache_size == 8 and copy.precision == "fp32"
    torch.testing.assert_close(copy(sentences).layers, expected, rtol=0, atol=1e-6)
