"""The data side of sense maps: uses of a word, deterministic PCA and k-means, ambiguous words."""

import numpy
import pytest
import spacy

from spacy_elmo.analysis.senses import (
    WordUses,
    ambiguous_words,
    collect_uses,
    dispersion,
    fit_pca,
    kmeans,
    sense_map,
    word_uses,
)
from spacy_elmo.analysis.vectors import elmo_pipeline, embed, unit_rows
from spacy_elmo.pipeline.extensions import install_extensions

TEXTS = [
    "I sat by the bank of the river .",
    "The Bank approved the loan .",
    "Nothing here .",
    "She walked to the bank , then to the other bank .",
]


@pytest.fixture(scope="module")
def tiny_nlp(tiny_model_dir):
    return elmo_pipeline(tiny_model_dir)


@pytest.fixture(scope="module")
def embedded(tiny_nlp):
    return list(embed(tiny_nlp, [tiny_nlp.make_doc(text) for text in TEXTS]))


def test_word_uses_gathers_every_use_case_insensitively(embedded):
    uses = word_uses(embedded, "bank", layer=-1)
    assert len(uses) == 4 and uses.layer == 2
    assert uses.positions == [(0, 4), (1, 1), (3, 4), (3, 10)]
    for vector, (doc, token) in zip(uses.vectors, uses.positions):
        numpy.testing.assert_array_equal(vector, embedded[doc]._.elmo.layers[2, token])
    numpy.testing.assert_allclose(uses.context_free, embedded[0]._.elmo.layers[0, 4], atol=1e-6)
    assert [uses.sentences[i][uses.offsets[i] : uses.offsets[i] + 4] for i in range(4)] == ["bank", "Bank", "bank", "bank"]
    assert uses.context(1) == "The Bank approved the loan ."
    assert uses.context_parts(3, width=6) == ("…other ", "bank", " .")


def test_word_uses_reads_the_layer_asked_for_and_names_bad_ones(embedded):
    first = word_uses(embedded, "bank", layer=1)
    assert first.layer == 1
    numpy.testing.assert_array_equal(first.vectors[0], embedded[0]._.elmo.layers[1, 4])
    with pytest.raises(ValueError, match="layer 3 does not exist: the model has layers 0..2"):
        word_uses(embedded, "bank", layer=3)
    with pytest.raises(ValueError, match="'loans' does not occur in the corpus"):
        word_uses(embedded, "loans")


def test_word_uses_needs_embedded_docs():
    install_extensions()
    with pytest.raises(ValueError, match="carry no doc._.elmo.layers"):
        word_uses([spacy.blank("en")("a bank")], "bank")


def test_word_uses_takes_the_sentence_when_the_doc_has_boundaries(tiny_model_dir):
    nlp = elmo_pipeline(tiny_model_dir)
    nlp.add_pipe("sentencizer", first=True)
    (doc,) = nlp.pipe(["It rained. The bank was closed."])
    uses = word_uses([doc], "bank")
    assert uses.sentences == ["The bank was closed."] and uses.offsets == [4]


def test_collect_uses_embeds_only_the_docs_holding_the_word(tiny_nlp, embedded, monkeypatch):
    from spacy_elmo.analysis import senses

    embedded_texts = []

    def recording_embed(nlp, docs, **kwargs):
        embedded_texts.extend(doc.text for doc in docs)
        return embed(nlp, docs, **kwargs)

    monkeypatch.setattr(senses, "embed", recording_embed)
    uses = collect_uses(tiny_nlp, (tiny_nlp.make_doc(text) for text in TEXTS), "bank")
    assert embedded_texts == [TEXTS[0], TEXTS[1], TEXTS[3]]
    assert uses.positions == [(0, 4), (1, 1), (2, 4), (2, 10)]  # numbered among the docs that hold it
    numpy.testing.assert_allclose(uses.vectors, word_uses(embedded, "bank").vectors, atol=1e-5)


def test_a_layer_the_model_lacks_is_an_error_before_any_doc_is_read(tiny_nlp):
    def unread():
        raise AssertionError("a doc was read")
        yield

    with pytest.raises(ValueError, match="layer 3 does not exist: the model has layers 0..2"):
        collect_uses(tiny_nlp, unread(), "bank", layer=3)


def naive_pca(points, k):
    """Eigenvectors of the covariance matrix, largest eigenvalue first."""
    values, vectors = numpy.linalg.eigh(numpy.cov(points, rowvar=False))
    order = numpy.argsort(values)[::-1][:k]
    return vectors[:, order].T, values[order] / values.sum()


def test_pca_matches_the_covariance_eigenvectors_up_to_sign():
    rng = numpy.random.default_rng(3)
    points = rng.normal(size=(60, 5)) @ numpy.diag([5.0, 3.0, 1.0, 0.5, 0.1]) + 7.0
    projection = fit_pca(points, 2)
    axes, explained = naive_pca(points, 2)
    for got, expected in zip(projection.components, axes):
        assert min(numpy.abs(got - expected).max(), numpy.abs(got + expected).max()) < 1e-8
    numpy.testing.assert_allclose(projection.explained, explained, atol=1e-10)
    numpy.testing.assert_allclose(projection.mean, points.mean(axis=0))
    numpy.testing.assert_allclose(projection.transform(points), (points - points.mean(axis=0)) @ projection.components.T)


def test_pca_is_deterministic_with_a_fixed_sign_convention():
    rng = numpy.random.default_rng(4)
    points = rng.normal(size=(40, 6))
    first, second = fit_pca(points, 3), fit_pca(points.copy(), 3)
    numpy.testing.assert_array_equal(first.components, second.components)
    for axis in first.components:
        assert axis[numpy.argmax(numpy.abs(axis))] > 0
    flipped = fit_pca(-points, 3)  # the same axes up to sign: the convention picks the same ones
    numpy.testing.assert_allclose(flipped.components, first.components, atol=1e-10)


def test_pca_of_identical_points_gives_zeros_not_nan():
    projection = fit_pca(numpy.ones((5, 4)), 2)
    assert numpy.array_equal(projection.transform(numpy.ones((5, 4))), numpy.zeros((5, 2)))
    assert numpy.array_equal(projection.explained, [0.0, 0.0])


def planted(n_per_cluster=30, seed=0):
    rng = numpy.random.default_rng(seed)
    a = rng.normal(loc=[4.0, 0.0, 0.0], scale=0.5, size=(n_per_cluster, 3))
    b = rng.normal(loc=[-4.0, 1.0, 0.0], scale=0.5, size=(n_per_cluster, 3))
    order = rng.permutation(2 * n_per_cluster)
    truth = numpy.array([0] * n_per_cluster + [1] * n_per_cluster)[order]
    return numpy.concatenate([a, b])[order], truth


def test_kmeans_separates_two_planted_clusters_numbered_by_first_point():
    points, truth = planted()
    clusters = kmeans(points, 2)
    expected = truth if truth[0] == 0 else 1 - truth
    numpy.testing.assert_array_equal(clusters, expected)
    assert clusters[0] == 0


def test_kmeans_is_deterministic_and_checks_k():
    points, _ = planted(seed=1)
    numpy.testing.assert_array_equal(kmeans(points, 3), kmeans(points, 3))
    assert set(kmeans(points, 3)) == {0, 1, 2}
    numpy.testing.assert_array_equal(kmeans(points, 2, seed=5), kmeans(points, 2, seed=0))
    with pytest.raises(ValueError, match="k = 3 needs at least 3 points, got 2"):
        kmeans(points[:2], 3)


def fake_uses(vectors, context_free):
    n = len(vectors)
    return WordUses(
        "bank",
        2,
        numpy.asarray(vectors, dtype=numpy.float32),
        numpy.asarray(context_free, dtype=numpy.float32),
        ["a bank"] * n,
        [2] * n,
        [(i, 1) for i in range(n)],
    )


def test_sense_map_projects_clusters_and_places_the_context_free_vector():
    points, truth = planted()
    uses = fake_uses(points, [1.0, 0.0, 0.0])
    sense = sense_map(uses, clusters=2)
    assert sense.coordinates.shape == (60, 2) and sense.context_free.shape == (2,)
    assert len(set(zip(truth, sense.groups))) == 2  # one group per planted cluster
    unit = unit_rows(uses.vectors, numpy.float64)
    projection = fit_pca(unit)
    numpy.testing.assert_allclose(sense.coordinates, projection.transform(unit))
    numpy.testing.assert_allclose(sense.context_free, projection.transform([[1.0, 0.0, 0.0]])[0])
    assert sense.explained[0] > 0.5


def test_sense_map_takes_labels_and_checks_them():
    uses = fake_uses(planted(5)[0], [1.0, 0.0, 0.0])
    labels = ["money" if i % 2 else "river" for i in range(10)]
    assert sense_map(uses, labels=labels).groups == labels
    with pytest.raises(ValueError, match="3 labels given for 10 uses of 'bank'"):
        sense_map(uses, labels=labels[:3])
    with pytest.raises(ValueError, match="needs at least 2 uses"):
        sense_map(fake_uses(planted(5)[0][:1], [1.0, 0.0, 0.0]))


def test_dispersion_is_zero_for_alike_vectors_and_grows_with_spread():
    assert dispersion(numpy.array([[1.0, 0.0], [2.0, 0.0]])) == pytest.approx(0.0)
    assert dispersion(numpy.array([[1.0, 0.0], [0.0, 1.0]])) > dispersion(numpy.array([[1.0, 0.0], [1.0, 0.2]])) > 0


def planted_docs(n=10):
    """Docs with fake layers: 'bank' points every which way, 'river' always the same way."""
    install_extensions()
    nlp = spacy.blank("en")
    rng = numpy.random.default_rng(0)
    docs = []
    for _ in range(n):
        doc = nlp("bank river the water")
        layers = numpy.zeros((3, 4, 8), dtype=numpy.float32)
        layers[:, 0] = rng.normal(size=(3, 8))
        layers[:, 1] = numpy.arange(8) + 1.0
        layers[:, 3] = numpy.arange(8)[::-1] + rng.normal(scale=0.3, size=8)
        doc._.elmo_data = {"mixed": layers[-1], "layers": layers}
        docs.append(doc)
    return docs


def test_ambiguous_words_ranks_content_words_by_spread():
    docs = planted_docs()
    found = ambiguous_words(docs, n=5, min_count=10)
    assert [spread.word for spread in found] == ["bank", "water", "river"]  # "the" is a stop word
    assert all(spread.uses == 10 for spread in found)
    assert found[-1].spread == pytest.approx(0.0, abs=1e-7)
    assert found[0].spread > found[1].spread > 0
    baseline = dispersion(numpy.concatenate([doc._.elmo.layers[2][[0, 1, 3]] for doc in docs]))  # every content token
    assert found[0].relative == pytest.approx(found[0].spread / baseline)


def test_ambiguous_words_keeps_only_frequent_words():
    assert ambiguous_words(planted_docs(4), min_count=5) == []
    assert [s.word for s in ambiguous_words(planted_docs(5), n=1, min_count=5)] == ["bank"]
