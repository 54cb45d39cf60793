"""Layers computed ahead of time (`use_precomputed_layers`, the `[initialize.after_init]`
callback `spacy-elmo.precomputed_layers.v1`): the sentences a file holds take their layers
from it, the others from the biLM; a saved pipeline does not keep the files; bad files are
refused with a clear message."""

import json

import h5py
import numpy
import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.io import load_model

HELD = ["I sat by the bank of the river .", "She took cash from the bank ."]
OTHER = "The river rose ."


def elmo_nlp(model_dir, **settings):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(model_dir), "layer_cache": "never", **settings})
    return nlp


def write_layers(path, sentences, shape_of, seed=0, use_sentence_keys=False):
    """A file in `dump`'s layout holding random layers (unlike any biLM's) for `sentences`."""
    rng = numpy.random.default_rng(seed)
    values = {}
    with h5py.File(path, "w") as out:
        for index, sentence in enumerate(sentences):
            values[sentence] = rng.normal(size=shape_of(len(sentence.split()))).astype(numpy.float32)
            out.create_dataset(sentence if use_sentence_keys else str(index), data=values[sentence])
        if not use_sentence_keys:
            out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())[0] = json.dumps({s: str(i) for i, s in enumerate(sentences)})
    return values


def bilm_shape(model_dir):
    config = load_model(model_dir).config
    return lambda n_tokens: (config.n_output_layers, n_tokens, config.output_dim)


@pytest.mark.parametrize("use_sentence_keys", [False, True])
def test_held_sentences_read_the_file_and_others_the_bilm(tiny_model_dir, tmp_path, use_sentence_keys):
    path = tmp_path / "layers.hdf5"
    stored = write_layers(path, HELD, bilm_shape(tiny_model_dir), use_sentence_keys=use_sentence_keys)
    plain = elmo_nlp(tiny_model_dir)
    nlp = elmo_nlp(tiny_model_dir)
    nlp.get_pipe("elmo").use_precomputed_layers([str(path)])
    docs = list(nlp.pipe([*HELD, OTHER]))
    for doc, sentence in zip(docs, HELD):
        numpy.testing.assert_array_equal(doc._.elmo.layers, stored[sentence])
        mix = nlp.get_pipe("elmo").mix
        numpy.testing.assert_allclose(doc._.elmo.mixed, mix.gamma * numpy.tensordot(mix.weights, stored[sentence], axes=1), rtol=1e-6)
    numpy.testing.assert_allclose(docs[2]._.elmo.layers, plain(OTHER)._.elmo.layers, atol=1e-6)


def test_mixed_only_output_mixes_the_stored_layers(tiny_model_dir, tmp_path):
    path = tmp_path / "layers.hdf5"
    write_layers(path, HELD, bilm_shape(tiny_model_dir))
    kept = elmo_nlp(tiny_model_dir)
    mixed_only = elmo_nlp(tiny_model_dir, keep_layers=False)
    for nlp in (kept, mixed_only):
        nlp.get_pipe("elmo").use_precomputed_layers([str(path)])
    numpy.testing.assert_allclose(mixed_only(HELD[1])._.elmo.mixed, kept(HELD[1])._.elmo.mixed, rtol=1e-6)
    assert not numpy.allclose(mixed_only(HELD[1])._.elmo.mixed, elmo_nlp(tiny_model_dir)(HELD[1])._.elmo.mixed, atol=1e-3)


def test_the_first_file_holding_a_sentence_gives_it(tiny_model_dir, tmp_path):
    shape = bilm_shape(tiny_model_dir)
    first = write_layers(tmp_path / "a.hdf5", HELD[:1], shape, seed=1)
    second = write_layers(tmp_path / "b.hdf5", HELD, shape, seed=2)
    nlp = elmo_nlp(tiny_model_dir)
    nlp.get_pipe("elmo").use_precomputed_layers([str(tmp_path / "a.hdf5"), str(tmp_path / "b.hdf5")])
    numpy.testing.assert_array_equal(nlp(HELD[0])._.elmo.layers, first[HELD[0]])
    numpy.testing.assert_array_equal(nlp(HELD[1])._.elmo.layers, second[HELD[1]])


def test_a_stored_sentence_of_another_length_counts_as_absent(tiny_model_dir, tmp_path):
    path = tmp_path / "layers.hdf5"
    config_shape = bilm_shape(tiny_model_dir)
    write_layers(path, HELD, lambda n: config_shape(n + 1))
    nlp = elmo_nlp(tiny_model_dir)
    nlp.get_pipe("elmo").use_precomputed_layers([str(path)])
    numpy.testing.assert_allclose(nlp(HELD[0])._.elmo.layers, elmo_nlp(tiny_model_dir)(HELD[0])._.elmo.layers, atol=1e-6)


def test_a_dump_all_file_gives_its_own_values(tiny_model_dir, tmp_path):
    """`dump --all` writes what the component reads back, byte for byte."""
    text = tmp_path / "held.txt"
    text.write_text("\n".join(HELD) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["dump", str(tiny_model_dir), str(text), str(tmp_path / "held.hdf5"), "--all"])
    assert result.exit_code == 0, result.output
    nlp = elmo_nlp(tiny_model_dir)
    nlp.get_pipe("elmo").use_precomputed_layers([str(tmp_path / "held.hdf5")])
    with h5py.File(tmp_path / "held.hdf5", "r") as dumped:
        for index, sentence in enumerate(HELD):
            numpy.testing.assert_array_equal(nlp(sentence)._.elmo.layers, dumped[str(index)][()])


def test_training_initialization_reads_the_files_and_a_saved_pipeline_does_not(tiny_model_dir, tmp_path):
    """The callback works on a frozen elmo component, which `spacy train` leaves out of
    `nlp.initialize()`."""
    path = tmp_path / "layers.hdf5"
    stored = write_layers(path, HELD, bilm_shape(tiny_model_dir))
    nlp = elmo_nlp(tiny_model_dir)
    nlp.config["initialize"]["after_init"] = {"@callbacks": "spacy-elmo.precomputed_layers.v1", "paths": [str(path)]}
    with nlp.select_pipes(disable=["elmo"]):
        nlp.initialize()
    numpy.testing.assert_array_equal(nlp(HELD[0])._.elmo.layers, stored[HELD[0]])
    nlp.to_disk(tmp_path / "pipeline")
    path.unlink()
    loaded = spacy.load(tmp_path / "pipeline")
    numpy.testing.assert_allclose(loaded(HELD[0])._.elmo.layers, elmo_nlp(tiny_model_dir)(HELD[0])._.elmo.layers, atol=1e-6)


def test_bad_files_are_refused_with_their_reason(tiny_model_dir, tmp_path):
    component = elmo_nlp(tiny_model_dir).get_pipe("elmo")
    shape = bilm_shape(tiny_model_dir)
    with pytest.raises(ValueError, match="missing.hdf5 not found"):
        component.use_precomputed_layers([str(tmp_path / "missing.hdf5")])
    (tmp_path / "text.hdf5").write_text("not hdf5")
    with pytest.raises(ValueError, match="text.hdf5 is not an hdf5 file"):
        component.use_precomputed_layers([str(tmp_path / "text.hdf5")])
    write_layers(tmp_path / "top.hdf5", HELD, lambda n: shape(n)[1:])
    with pytest.raises(ValueError, match="write it with `dump --all`"):
        component.use_precomputed_layers([str(tmp_path / "top.hdf5")])
    write_layers(tmp_path / "wide.hdf5", HELD, lambda n: (shape(n)[0], n, shape(n)[2] * 2))
    with pytest.raises(ValueError, match="the biLM gives"):
        component.use_precomputed_layers([str(tmp_path / "wide.hdf5")])
    write_layers(tmp_path / "empty.hdf5", [], shape)
    with pytest.raises(ValueError, match="holds no sentences"):
        component.use_precomputed_layers([str(tmp_path / "empty.hdf5")])
