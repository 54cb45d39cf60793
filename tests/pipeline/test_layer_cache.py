"""The per-sentence layer cache: exact values, byte budgets, eviction, spilling, and when
the elmo component uses it."""

import numpy
import pytest
import spacy

from elmo_testing import elmo_tagging_pipeline, train_pipeline
from spacy_elmo.pipeline.layer_cache import LayerCache, entry_bytes

TEXTS = [
    "I sat by the bank of the river.",
    "She took cash from the bank.",
    "",
    "  ",
    "A much longer sentence, so that the batches hold rows of several lengths and some padding.",
    "Bank!",
]


def value(seed: int, n_tokens: int = 5) -> numpy.ndarray:
    return numpy.random.default_rng(seed).normal(size=(3, n_tokens, 12)).astype(numpy.float32)


def test_values_come_back_exactly_and_cannot_be_changed():
    cache = LayerCache(max_bytes=10**6)
    stored = value(0)
    cache.put(("a", "b"), stored)
    stored[0, 0, 0] = 99.0  # the cache holds its own copy
    got = cache.get(("a", "b"))
    numpy.testing.assert_array_equal(got, value(0))
    assert got.dtype == numpy.float32 and not got.flags.writeable
    assert cache.get(("a",)) is None and cache.get(("b", "a")) is None
    assert (cache.stats.hits, cache.stats.misses) == (1, 2)


def test_memory_stays_within_the_budget_and_the_least_recently_used_goes_first():
    one = entry_bytes(("w0",), value(0))
    cache = LayerCache(max_bytes=3 * one + 10)
    for k in range(3):
        cache.put((f"w{k}",), value(k))
    assert len(cache) == 3 and cache.memory_bytes <= cache.max_bytes
    cache.get(("w0",))  # w0 is now the most recently used
    cache.put(("w3",), value(3))
    assert ("w1",) not in cache and all((f"w{k}",) in cache for k in (0, 2, 3))
    assert cache.stats.evictions == 1 and cache.memory_bytes <= cache.max_bytes
    for k in range(4, 40):
        cache.put((f"w{k}",), value(k))
        assert cache.memory_bytes <= cache.max_bytes
    numpy.testing.assert_array_equal(cache.get(("w39",)), value(39))
    assert LayerCache(max_bytes=one - 1).put(("w0",), value(0)) is None
    tiny = LayerCache(max_bytes=one - 1)
    tiny.put(("w0",), value(0))
    assert len(tiny) == 0 and tiny.memory_bytes == 0  # an entry larger than the budget is not kept


def test_entries_pushed_out_of_memory_spill_to_disk_within_their_budget(tmp_path):
    one = entry_bytes(("w0",), value(0))
    cache = LayerCache(max_bytes=2 * one, spill_dir=tmp_path, max_spill_bytes=3 * value(0).nbytes)
    for k in range(8):
        cache.put((f"w{k}",), value(k))
    assert cache.memory_bytes <= 2 * one and cache.spill_bytes <= 3 * value(0).nbytes
    assert len(cache) == 5  # 2 in memory, 3 on disk, the rest dropped
    for k in (0, 1, 2, 6, 7):
        numpy.testing.assert_array_equal(cache.get((f"w{k}",)), value(k))
    assert cache.stats.spilled_hits == 3
    assert cache.get(("w4",)) is None
    cache.clear()
    assert len(cache) == 0 and cache.spill_bytes == 0


def test_budgets_are_checked(tmp_path):
    with pytest.raises(ValueError, match="must not be negative"):
        LayerCache(max_bytes=-1)
    with pytest.raises(ValueError, match="needs a spill folder"):
        LayerCache(max_bytes=10, max_spill_bytes=10)
    with pytest.raises(ValueError, match="does not exist"):
        LayerCache(max_bytes=10, spill_dir=tmp_path / "missing", max_spill_bytes=10)
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="elmo -> layer_cache.*is not typing.Literal"):
        nlp.add_pipe("elmo", config={"layer_cache": "sometimes"})
    with pytest.raises(ValueError, match="layer_cache_bytes must be 0 or positive"):
        nlp.add_pipe("elmo", name="e2", config={"layer_cache_bytes": -5})


def test_a_missing_spill_folder_is_an_error_only_where_the_cache_spills(tiny_model_dir, tmp_path):
    """The folder is a setting of the machine that trains: a saved pipeline loads without it."""
    missing = str(tmp_path / "missing")
    spilling = elmo_nlp(tiny_model_dir, layer_cache="always", layer_cache_spill_bytes=1000, layer_cache_dir=missing)
    with pytest.raises(ValueError, match="missing: the layer cache's spill folder does not exist"):
        spilling("some text")
    never = elmo_nlp(tiny_model_dir, layer_cache="never", layer_cache_spill_bytes=1000, layer_cache_dir=missing)
    never.to_disk(tmp_path / "pipeline")
    assert spacy.load(tmp_path / "pipeline")("some text")._.elmo.layers.shape == (3, 2, 12)


def elmo_nlp(model_dir, **settings):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(model_dir), "batch_tokens": 64, "window_size": 16, "window_overlap": 4, **settings})
    return nlp


def layers_of(nlp, texts=TEXTS, batch_size=4):
    return [doc._.elmo.layers for doc in nlp.pipe(texts, batch_size=batch_size)]


@pytest.mark.parametrize("keep_layers", [True, False])
def test_cached_features_are_bitwise_those_of_the_uncached_path(tiny_model_dir, keep_layers):
    """The first pass embeds exactly as without a cache; every later hit returns those bytes.
    (Without a cache, the same sentence in another batch may differ by float rounding.)"""
    plain = elmo_nlp(tiny_model_dir, layer_cache="never", keep_layers=keep_layers)
    cached = elmo_nlp(tiny_model_dir, layer_cache="always", keep_layers=keep_layers)
    attr = "layers" if keep_layers else "mixed"
    expected = [getattr(doc._.elmo, attr) for doc in plain.pipe(TEXTS, batch_size=4)]
    for batch_size in (4, 1):  # the first pass fills the cache, the second reads it
        got = [getattr(doc._.elmo, attr) for doc in cached.pipe(TEXTS, batch_size=batch_size)]
        for a, b in zip(got, expected):
            numpy.testing.assert_array_equal(a, b)
    cache = cached.get_pipe("elmo").active_cache
    assert cache.stats.hits > 0 and cache.stats.misses == len(cache)
    repeated = [getattr(doc._.elmo, attr) for doc in cached.pipe([TEXTS[4], "new words here", TEXTS[4]], batch_size=2)]
    numpy.testing.assert_array_equal(repeated[0], expected[4])
    numpy.testing.assert_array_equal(repeated[2], expected[4])
    # windows: a long doc's overlapping pieces are cached one by one
    assert len(cache) > len(set(t for t in TEXTS if t.strip()))
    assert plain.get_pipe("elmo").active_cache is None


def test_a_small_budget_evicts_and_still_gives_the_same_vectors(tiny_model_dir, tmp_path):
    plain = elmo_nlp(tiny_model_dir, layer_cache="never")
    expected = layers_of(plain)
    for settings in ({"layer_cache_bytes": 4000}, {"layer_cache_bytes": 4000, "layer_cache_spill_bytes": 20000, "layer_cache_dir": str(tmp_path)}):
        cached = elmo_nlp(tiny_model_dir, layer_cache="always", **settings)
        first = layers_of(cached, batch_size=3)
        for _ in range(2):
            again = layers_of(cached, batch_size=3)
            for a, b, c in zip(again, first, expected):
                # an evicted sentence is embedded again, in another batch: equal to rounding
                numpy.testing.assert_allclose(a, c, rtol=0, atol=1e-5)
                numpy.testing.assert_allclose(b, c, rtol=0, atol=1e-5)
        cache = cached.get_pipe("elmo").active_cache
        assert cache.stats.evictions > 0 and cache.memory_bytes <= 4000
        if "layer_cache_spill_bytes" in settings:
            assert 0 < cache.spill_bytes <= 20000 and cache.stats.spilled_hits > 0
        else:
            assert cache.spill_bytes == 0 and cache.stats.spilled_hits == 0


def test_forked_workers_give_the_vectors_of_one_process(tiny_model_dir, tmp_path):
    """`nlp.pipe(n_process=2)` with a warm cache: each worker keeps the memory part it
    inherited and spills to a file of its own."""
    settings = {"layer_cache_bytes": 4000, "layer_cache_spill_bytes": 40000, "layer_cache_dir": str(tmp_path)}
    nlp = elmo_nlp(tiny_model_dir, layer_cache="always", **settings)
    expected = layers_of(nlp, TEXTS * 2)
    assert nlp.get_pipe("elmo").active_cache.spill_bytes > 0
    forked = [doc._.elmo.layers for doc in nlp.pipe(TEXTS * 4, n_process=2, batch_size=2)]
    for a, b in zip(forked, expected * 2):
        numpy.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_a_pickled_cache_arrives_empty_with_its_budgets(tmp_path):
    import pickle

    cache = LayerCache(max_bytes=10**6, spill_dir=tmp_path, max_spill_bytes=10**6)
    cache.put(("a",), value(0))
    copy = pickle.loads(pickle.dumps(cache))
    assert len(copy) == 0 and (copy.max_bytes, copy.spill_dir, copy.max_spill_bytes) == (10**6, tmp_path, 10**6)


def test_by_default_the_cache_is_on_only_once_a_downstream_mix_trains(tiny_model_dir, tmp_path):
    nlp = elmo_tagging_pipeline(tiny_model_dir)
    elmo = nlp.get_pipe("elmo")
    assert elmo.settings.layer_cache == "training"
    train_pipeline(nlp, steps=0)
    list(nlp.pipe(TEXTS))
    assert elmo.active_cache is None  # inference: no cache
    train_pipeline(nlp, steps=3)
    assert elmo.active_cache is not None and len(elmo.active_cache) > 0
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    list(loaded.pipe(TEXTS))
    assert loaded.get_pipe("elmo").active_cache is None  # a loaded pipeline predicts without it
    assert elmo_nlp(tiny_model_dir, layer_cache="never").get_pipe("elmo").active_cache is None


def test_changing_the_model_empties_the_cache(tiny_model_dir):
    from elmo_testing import random_bilm

    nlp = elmo_nlp(tiny_model_dir, layer_cache="always")
    first = nlp(TEXTS[0])._.elmo.layers
    elmo = nlp.get_pipe("elmo")
    elmo.set_bilm(random_bilm(seed=3))
    assert len(elmo.active_cache) == 0
    assert not numpy.allclose(nlp(TEXTS[0])._.elmo.layers, first)
