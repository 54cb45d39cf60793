"""ELMo in trained spaCy pipelines: shapes from the elmo component, task-specific mixes,
round trips of trained pipelines, and `nlp.replace_listeners`."""

import numpy
import pytest
import spacy
from spacy.util import load_model_from_config

from elmo_testing import TAGGED, elmo_tagging_pipeline, hash_embed, tagged_examples, train_pipeline, with_elmo
from spacy_elmo.pipeline.architectures import is_elmo_mix, mix_gamma, mix_weights

TEXTS = ["They like the bank", "Eat green eggs", "", "the  loan"]


def predictions(nlp, texts=TEXTS):
    return [[(t.tag_, t.pos_, t.dep_, t.head.i) for t in doc] for doc in nlp.pipe(texts)]


def tok2vec_outputs(nlp, texts=TEXTS):
    return [doc.tensor.copy() for doc in nlp.pipe(texts)]


def mixes(nlp):
    return {name: [node for node in proc.model.walk() if is_elmo_mix(node)] for name, proc in nlp.pipeline if name != "elmo"}


def test_mixes_get_their_shape_from_the_elmo_component(tiny_model_dir):
    nlp = elmo_tagging_pipeline(tiny_model_dir)
    elmo = nlp.get_pipe("elmo")
    assert elmo._bilm is None  # the shape comes from the model's config.json: no weights read
    (mix,) = mixes(nlp)["tok2vec"]
    assert elmo.mixes == {"tok2vec": [mix]}
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (3, 12)
    with nlp.select_pipes(disable=["elmo"]):  # as spacy train does with a frozen elmo
        nlp.initialize(lambda: tagged_examples(nlp))
    assert elmo._bilm is None and mix.get_param("scalars").shape == (3,)


def test_a_mix_set_up_for_another_model_is_an_error(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    embed = with_elmo(hash_embed(8), 8, n_elmo_layers=4, elmo_width=12)
    encode = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": 8, "depth": 1, "window_size": 1, "maxout_pieces": 3}
    with pytest.raises(ValueError, match="component 'tok2vec': an ELMo mix set up for 4 layers of width 12, but the elmo component's model gives 3"):
        nlp.add_pipe("tok2vec", config={"model": {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode}})


def test_a_mix_without_an_elmo_component_before_it_asks_for_its_shape(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": with_elmo(hash_embed(8), 8)}})
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})  # after the tagger: it cannot help
    with pytest.raises(ValueError, match="put an 'elmo' component with loadable weights before this one"):
        nlp.initialize(lambda: tagged_examples(nlp))


def test_a_frozen_elmo_component_whose_weights_cannot_be_read_is_named_with_the_reason(tmp_path):
    """spaCy skips initializing a frozen component, so its weights are first needed by the mix."""
    nlp = elmo_tagging_pipeline(tmp_path / "no-such-model")
    problem = "needs the elmo component's layers, but component 'elmo' cannot read its weights: .*no-such-model: weights not found"
    with pytest.raises(ValueError, match=problem), nlp.select_pipes(disable=["elmo"]):  # as `spacy train` initializes
        nlp.initialize(lambda: tagged_examples(nlp))


def test_each_component_carries_its_own_mix(tiny_model_dir):
    """The paper's task-specific weights: tagger and morphologizer each mix the layers their own way."""
    nlp = elmo_tagging_pipeline(tiny_model_dir, per_task=True)
    found = mixes(nlp)
    assert found["tok2vec"] == [] and len(found["tagger"]) == 1 and len(found["morphologizer"]) == 1
    tagger_mix, morph_mix = found["tagger"][0], found["morphologizer"][0]
    assert tagger_mix is not morph_mix
    assert sorted(nlp.get_pipe("elmo").mixes) == ["morphologizer", "tagger"]
    train_pipeline(nlp, steps=60)
    assert [[t.tag_ for t in doc] for doc in nlp.pipe(text for text, _, _ in TAGGED)] == [tags for _, tags, _ in TAGGED]
    assert [[t.pos_ for t in doc] for doc in nlp.pipe(text for text, _, _ in TAGGED)] == [pos for _, _, pos in TAGGED]
    weights = [mix_weights(m) for m in (tagger_mix, morph_mix)]
    for w in weights:
        assert not numpy.allclose(w, 1 / 3, atol=1e-3)  # both learned something
    assert not numpy.allclose(weights[0], weights[1], atol=1e-3)  # and not the same thing
    assert mix_gamma(tagger_mix) != mix_gamma(morph_mix)


def test_a_trained_pipeline_round_trips_through_disk_and_bytes(tiny_model_dir, tmp_path):
    nlp = train_pipeline(elmo_tagging_pipeline(tiny_model_dir))
    expected, expected_vectors = predictions(nlp), tok2vec_outputs(nlp)
    assert all(tag for doc in expected[:2] for tag, _, _, _ in doc)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.pipe_names == ["elmo", "tok2vec", "tagger", "morphologizer"]
    assert predictions(loaded) == expected
    for a, b in zip(tok2vec_outputs(loaded), expected_vectors):
        numpy.testing.assert_array_equal(a, b)
    (mix,) = mixes(loaded)["tok2vec"]
    (original,) = mixes(nlp)["tok2vec"]
    numpy.testing.assert_array_equal(mix.get_param("scalars"), original.get_param("scalars"))
    assert mix_gamma(mix) == mix_gamma(original)
    assert loaded.get_pipe("elmo").mixes == {"tok2vec": [mix]}

    from_bytes = load_model_from_config(nlp.config)
    from_bytes.from_bytes(nlp.to_bytes())
    assert predictions(from_bytes) == expected
    with pytest.raises(ValueError, match="needs doc._.elmo.layers"):
        loaded.get_pipe("tok2vec")(loaded.make_doc("no elmo here"))  # trained: unannotated docs are an error


def test_the_elmo_component_keeps_track_of_mixes_as_the_pipeline_changes(tiny_model_dir):
    nlp = elmo_tagging_pipeline(tiny_model_dir, per_task=True)
    elmo = nlp.get_pipe("elmo")
    (tagger_mix,) = elmo.mixes["tagger"]
    assert elmo.remove_listener(tagger_mix, "tagger") and "tagger" not in elmo.mixes
    assert not elmo.remove_listener(tagger_mix, "tagger")
    nlp.remove_pipe("morphologizer")  # spaCy links the pipeline again
    assert sorted(elmo.mixes) == ["tagger"] and elmo.mixes["tagger"] == [tagger_mix]
    # to spaCy, elmo has no listeners to replace: the mixes are layers of their components
    assert elmo.listener_map == {} and elmo.listening_components == [] and elmo.listeners == []
    with pytest.raises(ValueError, match="E887"):
        nlp.replace_listeners("elmo", "tagger", ["model.tok2vec.mix"])


def test_a_saved_pipeline_loads_its_own_shape_whatever_lies_at_its_weights_path(tiny_model_dir, tmp_path):
    """The config names the biLM the pipeline was trained with; by the time it is loaded,
    another model of another shape may lie there."""
    from elmo_testing import TINY_SETTINGS, random_bilm
    from spacy_elmo.io import save_model
    from spacy_elmo.nn import BiLMConfig

    save_model(random_bilm(), tmp_path / "bilm")
    nlp = train_pipeline(elmo_tagging_pipeline(tmp_path / "bilm"), steps=5)
    expected = predictions(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    save_model(random_bilm(BiLMConfig(**{**TINY_SETTINGS, "projection_dim": 4, "n_layers": 3})), tmp_path / "bilm")
    loaded = spacy.load(tmp_path / "pipeline")
    assert predictions(loaded) == expected
    (mix,) = mixes(loaded)["tok2vec"]
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (3, 12)


def test_sourcing_a_component_with_its_own_mix_and_replace_listeners(tiny_model_dir, tmp_path):
    """spaCy replaces the listeners of a sourced component; the ELMo mix is not one."""
    from thinc.api import Config

    nlp = train_pipeline(elmo_tagging_pipeline(tiny_model_dir, per_task=True))
    expected = [[t.tag_ for t in doc] for doc in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "trained")
    config = Config().from_str(
        f"""
[nlp]
lang = "en"
pipeline = ["elmo", "tagger"]
[components]
[components.elmo]
source = "{tmp_path / "trained"}"
[components.tagger]
source = "{tmp_path / "trained"}"
replace_listeners = ["model.tok2vec.features"]
"""
    )
    sourced = load_model_from_config(config, auto_fill=True)
    assert [[t.tag_ for t in doc] for doc in sourced.pipe(TEXTS)] == expected
    assert sourced.get_pipe_config("tagger")["model"]["tok2vec"]["features"]["@architectures"] == "spacy.Tok2Vec.v2"
    assert list(sourced.get_pipe("elmo").mixes) == ["tagger"]


def test_replace_listeners_then_save_and_reload(tiny_model_dir, tmp_path):
    nlp = train_pipeline(elmo_tagging_pipeline(tiny_model_dir))
    expected = predictions(nlp)
    nlp.replace_listeners("tok2vec", "tagger", ["model.tok2vec"])
    tagger_mixes = mixes(nlp)["tagger"]
    assert len(tagger_mixes) == 1 and tagger_mixes[0] is not mixes(nlp)["tok2vec"][0]
    assert predictions(nlp) == expected
    nlp.to_disk(tmp_path / "replaced")
    loaded = spacy.load(tmp_path / "replaced")
    assert loaded.get_pipe_config("tagger")["model"]["tok2vec"]["@architectures"] == "spacy.Tok2Vec.v2"
    assert predictions(loaded) == expected
    assert sorted(loaded.get_pipe("elmo").mixes) == ["tagger", "tok2vec"]


def test_spacy_train_finds_the_shape_with_elmo_frozen(tiny_model_dir, tmp_path):
    """spaCy's `init_nlp` never initializes a frozen component; the mix still gets its shape."""
    from spacy.tokens import Doc, DocBin
    from spacy.training.initialize import init_nlp
    from thinc.api import Config

    vocab = spacy.blank("en").vocab
    docbin = DocBin()
    for text, tags, _ in TAGGED:
        docbin.add(Doc(vocab, words=text.split(), tags=tags))
    docbin.to_disk(tmp_path / "train.spacy")
    width = 8
    config = Config().from_str(
        f"""
[paths]
train = "{tmp_path / "train.spacy"}"
[nlp]
lang = "en"
pipeline = ["elmo", "tagger"]
[components]
[components.elmo]
factory = "elmo"
weights = "{tiny_model_dir}"
[components.tagger]
factory = "tagger"
[components.tagger.model]
@architectures = "spacy.Tagger.v2"
[components.tagger.model.tok2vec]
@architectures = "spacy-elmo.WithElmo.v1"
width = {width}
[components.tagger.model.tok2vec.features]
@architectures = "spacy.MultiHashEmbed.v2"
width = {width}
attrs = ["NORM"]
rows = [100]
include_static_vectors = false
[components.tagger.model.tok2vec.mix]
@architectures = "spacy-elmo.ElmoScalarMix.v2"
[corpora]
[corpora.train]
@readers = "spacy.Corpus.v1"
path = ${{paths.train}}
[corpora.dev]
@readers = "spacy.Corpus.v1"
path = ${{paths.train}}
[training]
frozen_components = ["elmo"]
annotating_components = ["elmo"]
"""
    )
    nlp = init_nlp(load_model_from_config(config, auto_fill=True).config)
    assert nlp.get_pipe("elmo")._bilm is None  # not initialized by spaCy
    (mix,) = mixes(nlp)["tagger"]
    assert mix.get_param("scalars").shape == (3,)
    assert [t.tag_ for t in nlp("They sat by the bank")]  # predicts, with the weights loaded on first use


def test_a_public_model_of_the_original_shape_loads_trains_a_step_and_saves(tmp_path):
    """The published 2x4096_512 configuration (seeded random weights in the public hdf5 +
    options format): a tagger with ELMo concatenated to its features trains, and the pipeline
    saves and loads with the same predictions."""
    from thinc.api import Config

    from elmo_testing import REPO, random_bilm
    from spacy_elmo.io import save_public_model
    from spacy_elmo.nn import BiLMConfig

    shape = BiLMConfig(**Config().from_disk(REPO / "configs" / "pretrain-gpu.cfg")["model"])
    assert (shape.n_layers, shape.lstm_dim, shape.projection_dim) == (2, 4096, 512)
    save_public_model(random_bilm(shape), tmp_path / "options.json", tmp_path / "weights.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "weights.hdf5"), "options": str(tmp_path / "options.json")})
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": with_elmo(hash_embed(16), 16)}})
    (mix,) = mixes(nlp)["tagger"]
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (3, 1024)
    train_pipeline(nlp, steps=2)  # the first update only moves the output layer, whose weights start at zero
    assert numpy.abs(mix.get_param("scalars")).max() > 0  # the second reached the mix
    expected = predictions(nlp, TEXTS[:2])
    nlp.to_disk(tmp_path / "pipeline")
    assert predictions(spacy.load(tmp_path / "pipeline"), TEXTS[:2]) == expected
