"""Properties over arbitrary text: character ids, segmentation into windows, and the
component's one finite row per token, the same alone and in a batch."""

from typing import List, Optional

import numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.language import Language
from spacy.tokens import Doc
from spacy.vocab import Vocab

from spacy_elmo.batching import token_budget_batches
from spacy_elmo.nn.chars import BEGIN_OF_WORD, END_OF_WORD, PADDING, batch_to_char_ids, token_to_char_ids
from spacy_elmo.pipeline.segments import doc_segments, windows

FAST = settings(max_examples=100, deadline=None, derandomize=True, database=None)
"""Reproducible (no example database, a fixed seed) and quick."""
COMPONENT = settings(FAST, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
"""For tests of the `nlp` fixture, which the examples share: they do not change it."""
WIDTH = 12
"""2P of the tiny model behind the `nlp` fixture."""

any_character = st.characters(exclude_categories=())
"""Every code point, lone surrogates included."""
special = st.sampled_from(["", " ", "  ", "\n", "\t", "\u3000", "\x00", "'))", "🦙", "a" * 200, "é" * 80])
token = st.one_of(st.text(max_size=20), st.text(min_size=50, max_size=300), special)
"""Surrogate-free text of any length, empty and whitespace strings, very long tokens."""


@FAST
@given(st.one_of(st.text(any_character, max_size=80), special), st.integers(3, 64))
def test_char_ids_have_a_fixed_shape_and_range_and_cut_long_tokens(text: str, width: int) -> None:
    ids = token_to_char_ids(text, width)
    encoded = text.encode("utf-8", "replace")[: width - 2]
    assert ids.shape == (width,) and ids.dtype == numpy.int64
    assert ids.min() >= 1 and ids.max() <= PADDING + 1
    assert ids[0] == BEGIN_OF_WORD + 1 and ids[len(encoded) + 1] == END_OF_WORD + 1
    assert bytes((ids[1 : len(encoded) + 1] - 1).astype(numpy.uint8)) == encoded
    assert (ids[len(encoded) + 2 :] == PADDING + 1).all()


@FAST
@given(st.lists(st.lists(token, max_size=6), max_size=5))
def test_batch_char_ids_are_the_tokens_ids_and_zero_past_each_sentence(sentences: List[List[str]]) -> None:
    ids = batch_to_char_ids(sentences)
    assert ids.shape == (len(sentences), max((len(s) for s in sentences), default=0), 50)
    for row, sentence in enumerate(sentences):
        for col, text in enumerate(sentence):
            numpy.testing.assert_array_equal(ids[row, col], token_to_char_ids(text))
        assert (ids[row, len(sentence) :] == 0).all()


@st.composite
def window_settings(draw: st.DrawFn) -> tuple:
    size = draw(st.integers(1, 200))
    return draw(st.integers(0, 2000)), size, draw(st.integers(0, size - 1))


@FAST
@given(window_settings())
def test_windows_keep_every_token_exactly_once_and_hold_at_most_size_tokens(setting: tuple) -> None:
    n_tokens, size, overlap = setting
    found = windows(n_tokens, size, overlap)
    kept = [i for start, _, keep_start, keep_end in found for i in range(start + keep_start, start + keep_end)]
    assert kept == list(range(n_tokens))
    for start, end, keep_start, keep_end in found:
        assert 0 <= start <= end <= n_tokens and end - start <= size
        assert 0 <= keep_start <= keep_end <= end - start
    assert found[-1][1] == n_tokens


@st.composite
def docs(draw: st.DrawFn, vocab: Vocab) -> Doc:
    """A doc of arbitrary non-empty tokens (whitespace ones among them), with sentence
    starts or without."""
    words = draw(st.lists(st.one_of(token, st.sampled_from([" ", "\n"])).filter(bool), max_size=60))
    spaces = draw(st.lists(st.booleans(), min_size=len(words), max_size=len(words)))
    starts: Optional[List[bool]] = None
    if words and draw(st.booleans()):
        starts = [True] + draw(st.lists(st.booleans(), min_size=len(words) - 1, max_size=len(words) - 1))
    return Doc(vocab, words=words, spaces=spaces, sent_starts=starts)


VOCAB = Vocab()


@FAST
@given(docs(VOCAB), st.booleans(), st.integers(1, 20), st.data())
def test_segments_cover_every_non_space_token_once_within_sentences_and_windows(doc: Doc, use_sentences: bool, window_size: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, window_size - 1))
    segments = doc_segments(doc, 3, use_sentences, window_size, overlap)
    kept = sorted(i for s in segments for i in s.token_indices[s.keep_start : s.keep_end])
    assert kept == [t.i for t in doc if not t.is_space]
    by_sentence = use_sentences and doc.has_annotation("SENT_START")
    for segment in segments:
        assert segment.doc_index == 3 and 1 <= len(segment.token_indices) <= window_size
        assert not any(doc[i].is_space for i in segment.token_indices)
        if by_sentence:
            assert len({doc[i].sent.start for i in segment.token_indices}) == 1


@FAST
@given(st.lists(st.integers(1, 50), max_size=40), st.integers(1, 200))
def test_token_budget_batches_hold_every_item_once_within_the_budget(lengths: List[int], budget: int) -> None:
    batches = list(token_budget_batches(list(enumerate(lengths)), budget, length=lambda item: item[1]))
    assert sorted(item for batch in batches for item in batch) == list(enumerate(lengths))
    for batch in batches:
        assert len(batch) == 1 or len(batch) * batch[0][1] <= budget
        assert [n for _, n in batch] == sorted((n for _, n in batch), reverse=True)


def assert_one_finite_row_per_token(doc: Doc) -> None:
    layers = doc._.elmo.layers
    assert layers.shape == (3, len(doc), WIDTH) and doc._.elmo.mixed.shape == (len(doc), WIDTH)
    assert numpy.isfinite(layers).all() and numpy.isfinite(doc._.elmo.mixed).all()
    spaces = [t.i for t in doc if t.is_space]
    assert not layers[:, spaces].any()


@COMPONENT
@given(st.one_of(st.text(max_size=200), special), st.lists(st.one_of(st.text(max_size=100), special), max_size=3))
def test_any_text_gives_one_finite_row_per_token_alone_and_in_a_batch(nlp: Language, text: str, others: List[str]) -> None:
    alone = nlp(text)
    assert_one_finite_row_per_token(alone)
    batch = list(nlp.pipe([*others, text, *others]))
    numpy.testing.assert_allclose(batch[len(others)]._.elmo.layers, alone._.elmo.layers, atol=1e-5, rtol=0)
    for doc, other in zip(batch, others):
        numpy.testing.assert_allclose(doc._.elmo.layers, nlp(other)._.elmo.layers, atol=1e-5, rtol=0)


@COMPONENT
@given(st.data())
def test_any_token_list_gives_one_finite_row_per_token_alone_and_in_a_batch(nlp: Language, data: st.DataObject) -> None:
    first, second = data.draw(docs(nlp.vocab)), data.draw(docs(nlp.vocab))
    pristine = first.copy()
    alone = nlp(first)
    assert_one_finite_row_per_token(alone)
    together = list(nlp.pipe([second, pristine]))
    numpy.testing.assert_allclose(together[1]._.elmo.layers, alone._.elmo.layers, atol=1e-5, rtol=0)
    assert_one_finite_row_per_token(together[0])
