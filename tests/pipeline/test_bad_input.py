"""Unusual text gives sane results, never a crash; long docs run in bounded pieces."""

import numpy
import spacy

from spacy_elmo.nn.chars import END_OF_WORD


def test_unusual_tokens_are_embedded(nlp):
    texts = [
        "x" * 500,
        "I love 🦙 and 🏦 💸",
        "我在河边的银行坐着。",
        "ctrl\x00char \x07bell \x1b[31m",
        "mixed Ünïcödé ﬁ ligature",
    ]
    for doc in nlp.pipe(texts):
        assert doc._.elmo.layers.shape == (3, len(doc), 12)
        assert numpy.all(numpy.isfinite(doc._.elmo.layers))
        rows = [t.i for t in doc if not t.is_space]
        assert numpy.abs(doc._.elmo.layers[:, rows]).sum(axis=(0, 2)).min() > 0


def test_long_tokens_are_cut_at_48_bytes(nlp):
    a = nlp("x" * 48)
    b = nlp("x" * 500)
    numpy.testing.assert_array_equal(a._.elmo.layers, b._.elmo.layers)
    assert END_OF_WORD == 259


def test_a_20000_token_doc_without_sentences_runs_in_bounded_batches(tiny_model_dir, monkeypatch):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "batch_tokens": 1024, "window_size": 128})
    component = nlp.get_pipe("elmo")
    bilm = component.bilm
    seen = []
    original = bilm.contextualize

    def recording_contextualize(tokens, lengths, state=None, boundaries=None):
        seen.append(tuple(tokens.shape[:2]))
        return original(tokens, lengths, state, boundaries)

    monkeypatch.setattr(bilm, "contextualize", recording_contextualize)
    words = [f"w{i % 997}" for i in range(20_000)]
    doc = nlp(" ".join(words))
    assert len(doc) == 20_000
    assert doc._.elmo.layers.shape == (3, 20_000, 12)
    assert max(rows * time for rows, time in seen) <= 1024
    assert max(time for _, time in seen) <= 128
    # windows of 128 overlapping by 32 start every 96 tokens; the last one ends at the doc's end
    assert sum(rows for rows, _ in seen) == -(-(20_000 - 128) // 96) + 1
    assert numpy.abs(doc._.elmo.mixed).sum(axis=1).min() > 0
