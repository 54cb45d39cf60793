"""spaCy round trips: pipelines to disk and bytes, docs to bytes and DocBin, multiprocessing."""

import multiprocessing

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_elmo import set_similarity_hooks

pytestmark = pytest.mark.filterwarnings("ignore:.*W109")  # spaCy: hooks are not serialized

TEXTS = ["I sat by the bank of the river.", "She took cash from the bank.", "", "  ", "Bank!"]


def test_pipeline_to_disk_and_load_gives_identical_vectors(nlp, tmp_path, tiny_model_dir):
    expected = nlp(TEXTS[0])._.elmo.layers
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.pipe_names == ["elmo"]
    numpy.testing.assert_array_equal(loaded(TEXTS[0])._.elmo.layers, expected)
    assert loaded.get_pipe("elmo").settings == nlp.get_pipe("elmo").settings


def test_saved_pipeline_does_not_need_the_original_weights(tmp_path):
    from elmo_testing import random_bilm
    from spacy_elmo.io import save_model

    save_model(random_bilm(seed=5), tmp_path / "bilm")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "bilm")})
    expected = nlp(TEXTS[1])._.elmo.mixed
    nlp.to_disk(tmp_path / "pipeline")
    for path in (tmp_path / "bilm").iterdir():
        path.unlink()
    numpy.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[1])._.elmo.mixed, expected)


def test_pipeline_to_bytes_and_from_bytes(nlp):
    expected = nlp(TEXTS[1])._.elmo.layers
    data = nlp.to_bytes()
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo")  # no weights: they come from the bytes
    fresh.from_bytes(data)
    numpy.testing.assert_array_equal(fresh(TEXTS[1])._.elmo.layers, expected)


def test_doc_to_bytes_keeps_elmo_and_hooks_can_be_reattached(nlp):
    doc = nlp(TEXTS[0])
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    numpy.testing.assert_array_equal(restored._.elmo.layers, doc._.elmo.layers)
    numpy.testing.assert_array_equal(restored._.elmo.mixed, doc._.elmo.mixed)
    other = nlp(TEXTS[1])  # "bank" in another context: contextual similarity is below 1
    river_bank, money_bank = restored[4], other[5]
    assert river_bank.text == money_bank.text == "bank"
    set_similarity_hooks(restored)
    expected = float(doc[4]._.elmo @ money_bank._.elmo / (numpy.linalg.norm(doc[4]._.elmo) * numpy.linalg.norm(money_bank._.elmo)))
    assert expected < 1 - 1e-5  # spaCy without the hooks would say 1.0 (same text)
    assert river_bank.similarity(money_bank) == pytest.approx(expected, abs=1e-6)
    assert money_bank.similarity(river_bank) == pytest.approx(expected, abs=1e-6)


def test_docbin_with_user_data_keeps_elmo(nlp, tmp_path):
    docs = list(nlp.pipe(TEXTS))
    DocBin(docs=docs, store_user_data=True).to_disk(tmp_path / "docs.spacy")
    restored = list(DocBin().from_disk(tmp_path / "docs.spacy").get_docs(nlp.vocab))
    for original, copy in zip(docs, restored):
        assert copy._.elmo.layers.shape == original._.elmo.layers.shape
        numpy.testing.assert_array_equal(copy._.elmo.layers, original._.elmo.layers)


@pytest.fixture(params=["fork", "spawn"])
def start_method(request):
    """Run the test's worker processes with this multiprocessing start method."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(request.param, force=True)
    yield request.param
    multiprocessing.set_start_method(previous, force=True)


def test_two_processes_give_the_same_vectors_as_one(nlp, start_method):
    texts = TEXTS * 4
    single = [doc._.elmo.layers for doc in nlp.pipe(texts, n_process=1)]
    double = [doc._.elmo.layers for doc in nlp.pipe(texts, n_process=2, batch_size=3)]
    assert len(double) == len(single)
    for a, b in zip(single, double):
        numpy.testing.assert_allclose(b, a, atol=1e-5)  # workers run single-threaded


def test_similarity_after_two_processes(nlp):
    """Workers' hooks do not come back; a hooked doc still compares contextually with
    returned docs, and re-attaching the hooks makes returned docs contextual again."""
    hooked = nlp("the bank of the river")
    returned = list(nlp.pipe(["the bank gave cash"], n_process=2))[0]
    assert "similarity" not in returned.user_token_hooks
    expected = float(hooked[1]._.elmo @ returned[1]._.elmo / (numpy.linalg.norm(hooked[1]._.elmo) * numpy.linalg.norm(returned[1]._.elmo)))
    assert hooked[1].similarity(returned[1]) == pytest.approx(expected, abs=1e-6)
    set_similarity_hooks(returned)
    assert returned[1].similarity(hooked[1]) == pytest.approx(expected, abs=1e-6)
    assert expected < 0.9999
