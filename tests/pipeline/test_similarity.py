"""Similarity through the hooks is contextual cosine on the mixed vectors."""

import numpy
import pytest
import spacy


def cos(a, b):
    return float(a @ b / (numpy.linalg.norm(a) * numpy.linalg.norm(b)))


def test_same_word_in_two_contexts_is_not_identical(allennlp_fixture):
    nlp = spacy.blank("en")
    weights, options = allennlp_fixture / "lm_weights.hdf5", allennlp_fixture / "options.json"
    nlp.add_pipe("elmo", config={"weights": str(weights), "options": str(options), "mix": "top"})
    river = nlp("I sat by the bank of the river.")
    money = nlp("The bank gave me a loan.")
    plain_a, plain_b = spacy.blank("en")("the bank"), spacy.blank("en")("a bank")
    assert plain_a[1].similarity(plain_b[1]) == 1.0  # what spaCy says without the hooks
    similarity = river[4].similarity(money[1])
    assert similarity < 0.95
    assert similarity == pytest.approx(cos(river[4]._.elmo, money[1]._.elmo), abs=1e-6)
    assert river[4].similarity(river[4]) == pytest.approx(1.0)


def test_doc_and_span_similarity_use_mean_vectors(nlp):
    a, b = nlp("The river bank flooded."), nlp("The bank raised its rates.")
    assert a.similarity(b) == pytest.approx(cos(a._.elmo.mixed.mean(0), b._.elmo.mixed.mean(0)), abs=1e-6)
    assert a[1:3].similarity(b[0:2]) == pytest.approx(cos(a[1:3]._.elmo, b[0:2]._.elmo), abs=1e-6)
    numpy.testing.assert_allclose(a.vector, a._.elmo.mixed.mean(0), atol=1e-6)
    assert a.has_vector and a[1:3].has_vector
    assert a.vector_norm == pytest.approx(float(numpy.linalg.norm(a.vector)), rel=1e-5)


def test_hooks_can_be_switched_off(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "similarity_hooks": False})
    doc = nlp("the bank")
    assert doc._.elmo is not None
    assert "similarity" not in doc.user_token_hooks
