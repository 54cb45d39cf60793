"""`elmo_pipeline`, `iter_docs` and `embed`: the analyses see the vectors `doc._.elmo` holds."""

import json

import numpy
import pytest
import spacy

from spacy_elmo.analysis.vectors import elmo_pipeline, embed, iter_docs
from spacy_elmo.pipeline.component import elmo_component

TWO_SENTENCES = "The bank was closed. We sat on the bank of the river."


def saved_pipeline(path, tiny_model_dir, name="elmo", sentencizer=True, after=(), **elmo):
    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", name=name, config={"weights": str(tiny_model_dir), **elmo})
    for component in after:
        nlp.add_pipe(component).add_label("NN")
    nlp.initialize()
    nlp.to_disk(path)
    return path


def embedded(nlp, text):
    (doc,) = embed(nlp, [nlp.make_doc(text)])
    return doc._.elmo


def test_a_saved_pipeline_is_embedded_with_its_own_sentence_boundaries(tiny_model_dir, tmp_path):
    path = saved_pipeline(tmp_path / "pipe", tiny_model_dir)
    expected = spacy.load(path)(TWO_SENTENCES)._.elmo.layers
    numpy.testing.assert_array_equal(embedded(elmo_pipeline(path), TWO_SENTENCES).layers, expected)
    whole_line = embedded(elmo_pipeline(tiny_model_dir), TWO_SENTENCES).layers  # the model alone: one sequence
    assert numpy.abs(whole_line - expected).max() > 1e-3


def test_a_saved_pipelines_elmo_settings_hold_and_given_settings_override_them(tiny_model_dir, tmp_path):
    path = saved_pipeline(tmp_path / "pipe", tiny_model_dir, sentencizer=False, mix="top")
    vectors = embedded(elmo_pipeline(path), TWO_SENTENCES)
    numpy.testing.assert_array_equal(vectors.mixed, vectors.layers[-1])
    averaged = embedded(elmo_pipeline(path, mix="average"), TWO_SENTENCES)
    numpy.testing.assert_allclose(averaged.mixed, averaged.layers.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_components_after_the_elmo_one_are_not_loaded_and_the_component_is_named_elmo(tiny_model_dir, tmp_path):
    path = saved_pipeline(tmp_path / "pipe", tiny_model_dir, name="bilm", after=("tagger",))
    nlp = elmo_pipeline(path)
    assert nlp.pipe_names == ["sentencizer", "elmo"] and elmo_component(nlp).settings.keep_layers
    with pytest.raises(ValueError, match="--options is only used with a public .hdf5 file"):
        elmo_pipeline(path, options=tmp_path / "options.json")


def test_a_jsonl_file_gives_one_doc_per_text_field(tmp_path):
    path = tmp_path / "texts.jsonl"
    path.write_text("\n".join(json.dumps({"text": text, "id": i}) for i, text in enumerate(["A bank .", "", "Two  words"])) + "\n")
    assert [doc.text for doc in iter_docs(path, spacy.blank("en"))] == ["A bank .", "Two  words"]
    path.write_text('{"title": "no text"}\n')
    with pytest.raises(ValueError, match="line 1: expected an object with a string 'text' field"):
        list(iter_docs(path, spacy.blank("en")))


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.conllu", b"\n\n", r"empty.conllu: cannot be read as CoNLL-U \(not enough values to unpack"),
        ("broken.conllu", b"1\tThe\n", r"broken.conllu: cannot be read as CoNLL-U \("),
        ("latin1.conllu", b"1\tcaf\xe9\t_\t_\t_\t_\t0\troot\t_\t_\n", r"latin1.conllu: cannot be read as CoNLL-U \('utf-8' codec"),
        ("junk.spacy", b"not a docbin", r"junk.spacy: cannot be read as a DocBin \("),
    ],
)
def test_a_file_spacy_cannot_read_is_named_in_the_error(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        list(iter_docs(tmp_path / name, spacy.blank("en")))
