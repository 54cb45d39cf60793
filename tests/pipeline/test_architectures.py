"""The learned ELMo mixes (`spacy-elmo.ElmoScalarMix.v1`, `.v2`) and `spacy-elmo.WithElmo.v1`."""

import numpy
import pytest
import spacy
import srsly
from spacy.training import Example
from spacy.util import registry
from thinc.api import Adam, fix_random_seed

from spacy_elmo.pipeline.architectures import ElmoLayers, ElmoScalarMix, ElmoScalarMix_v2, WithElmo, mix_gamma, mix_weights, set_mix_dims

TRAIN = [
    ("I like green eggs", ["PRON", "VERB", "ADJ", "NOUN"]),
    ("Eat blue ham", ["VERB", "ADJ", "NOUN"]),
    ("They sat by the bank", ["PRON", "VERB", "ADP", "DET", "NOUN"]),
]


def annotated_docs(nlp, texts):
    return list(nlp.pipe(texts))


def test_mix_gradients_match_finite_differences(nlp):
    docs = annotated_docs(nlp, ["the bank of the river", "cash"])
    model = ElmoScalarMix()
    model.initialize(X=docs)
    model.set_param("scalars", numpy.asarray([0.3, -0.2, 0.5], dtype="f"))
    model.set_param("gamma", numpy.asarray([1.5], dtype="f"))
    rng = numpy.random.default_rng(0)
    targets = [rng.normal(size=(len(doc), 12)).astype("f") for doc in docs]

    def loss() -> float:
        outputs, _ = model.begin_update(docs)
        return float(sum((o * t).sum() for o, t in zip(outputs, targets)))

    _, backprop = model.begin_update(docs)
    backprop(targets)
    assert_gradients_match_finite_differences(model, ("scalars", "gamma"), loss, rel=2e-2, abs=1e-3)


def assert_gradients_match_finite_differences(model, names, loss, rel, abs):
    """The gradients `model` holds for `names` against central differences of `loss()`."""
    grads = {name: model.get_grad(name).copy() for name in names}
    for name, grad in grads.items():
        param = model.get_param(name).astype("float64")
        for k in range(param.shape[0]):
            shifted = []
            for eps in (1e-3, -1e-3):
                value = param.copy()
                value[k] += eps
                model.set_param(name, value.astype("f"))
                shifted.append(loss())
            model.set_param(name, param.astype("f"))
            assert grad[k] == pytest.approx((shifted[0] - shifted[1]) / 2e-3, rel=rel, abs=abs), (name, k)


def test_output_is_the_softmax_mix(nlp):
    docs = annotated_docs(nlp, ["the bank of the river"])
    model = ElmoScalarMix()
    model.initialize(X=docs)
    model.set_param("scalars", numpy.asarray([0.0, 1.0, 2.0], dtype="f"))
    weights = numpy.exp([0.0, 1.0, 2.0]) / numpy.exp([0.0, 1.0, 2.0]).sum()
    (out,) = model.predict(docs)
    numpy.testing.assert_allclose(out, numpy.tensordot(weights, docs[0]._.elmo.layers, axes=1), atol=1e-5)


def test_missing_layers_are_a_clear_error(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir), "keep_layers": False})
    model = ElmoScalarMix()
    with pytest.raises(ValueError, match="keep_layers = true"):
        model.initialize(X=[nlp("some text")])
    unannotated = ElmoScalarMix()
    with pytest.raises(ValueError, match="set n_elmo_layers"):
        unannotated.initialize(X=[nlp.make_doc("some text")])
    declared = ElmoScalarMix(n_elmo_layers=4, elmo_width=12)
    declared.initialize(X=[nlp.make_doc("some text")])
    with_layers = spacy.blank("en")
    with_layers.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    with pytest.raises(ValueError, match="3 layers of width 12.*set up for 4"):
        declared.predict([with_layers("some text")])


def test_a_tagger_learns_on_top_of_elmo_and_the_mix_moves(tiny_model_dir):
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    tok2vec = {"@architectures": "spacy-elmo.ElmoScalarMix.v1", "width": 16, "dropout": 0.0}
    tagger = nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TRAIN]
    elmo = nlp.get_pipe("elmo")
    nlp.initialize(lambda: [Example(elmo(nlp.make_doc(eg.reference.text)), eg.reference) for eg in examples])
    mix = tagger.model.get_ref("tok2vec").layers[0]
    initial_scalars = mix.get_param("scalars").copy()
    losses_seen = []
    optimizer = Adam(0.02)
    for _ in range(80):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses, annotates=["elmo"], exclude=["elmo"])
        losses_seen.append(losses["tagger"])
    assert losses_seen[-1] < 0.05 * losses_seen[0]
    assert not numpy.allclose(mix.get_param("scalars"), initial_scalars)
    assert [[t.tag_ for t in nlp(text)] for text, _ in TRAIN] == [tags for _, tags in TRAIN]


def test_architecture_resolves_from_a_config_block():
    config = {"model": {"@architectures": "spacy-elmo.ElmoScalarMix.v1", "width": 8, "dropout": 0.1}}
    model = registry.resolve(config)["model"]
    assert model.name.startswith("elmo_scalar_mix")


def test_spacy_train_with_the_shipped_tagger_config(tmp_path, tiny_model_dir):
    """`spacy train configs/tagger.cfg` runs end to end with a frozen, annotating elmo."""
    import subprocess
    import sys
    from pathlib import Path

    from spacy.tokens import Doc, DocBin

    vocab = spacy.blank("en").vocab
    docbin = DocBin()
    for text, tags in TRAIN * 4:
        docbin.add(Doc(vocab, words=text.split(), tags=tags))
    docbin.to_disk(tmp_path / "train.spacy")
    config = Path(__file__).resolve().parents[2] / "configs" / "tagger.cfg"
    command = [
        sys.executable,
        "-m",
        "spacy",
        "train",
        str(config),
        "-o",
        str(tmp_path / "out"),
        "--paths.train",
        str(tmp_path / "train.spacy"),
        "--paths.dev",
        str(tmp_path / "train.spacy"),
        "--paths.elmo",
        str(tiny_model_dir),
        "--training.max_steps",
        "30",
        "--training.eval_frequency",
        "10",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.pipe_names == ["elmo", "tagger"]
    doc = trained("They sat by the bank")
    assert doc._.elmo.layers.shape == (3, 5, 12)
    assert all(token.tag_ for token in doc)
    with pytest.raises(ValueError, match="needs doc._.elmo.layers"):
        trained.get_pipe("tagger")(trained.make_doc("no elmo here"))


# spacy-elmo.ElmoScalarMix.v2


def naive_mix(layers, scalars, gamma, layer_norm):
    """The paper's eq. 1 written out, in float64, with optional per-token normalization."""
    layers = numpy.asarray(layers, dtype="float64")
    if layer_norm:
        mean = layers.mean(axis=-1, keepdims=True)
        var = ((layers - mean) ** 2).mean(axis=-1, keepdims=True)
        layers = (layers - mean) / numpy.sqrt(var + 1e-12)
    weights = numpy.exp(scalars) / numpy.exp(scalars).sum()
    return gamma * sum(w * layer for w, layer in zip(weights, layers))


def mix_v2(docs, **settings):
    model = ElmoScalarMix_v2(**settings)
    model.initialize(X=docs)
    return model


@pytest.mark.parametrize("layer_norm", [False, True])
def test_v2_starts_as_the_average_and_matches_the_naive_mix(nlp, layer_norm):
    docs = annotated_docs(nlp, ["the bank of the river", "cash"])
    model = mix_v2(docs, layer_norm=layer_norm)
    numpy.testing.assert_array_equal(model.get_param("scalars"), numpy.zeros(3, dtype="f"))
    assert mix_gamma(model) == 1.0
    numpy.testing.assert_allclose(mix_weights(model), [1 / 3] * 3, rtol=1e-6)
    model.set_param("scalars", numpy.asarray([0.4, -1.0, 0.7], dtype="f"))
    model.set_param("gamma_offset", numpy.asarray([0.5], dtype="f"))
    outputs = model.predict(docs)
    for doc, out in zip(docs, outputs):
        expected = naive_mix(doc._.elmo.layers, numpy.asarray([0.4, -1.0, 0.7]), 1.5, layer_norm)
        numpy.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_v2_layer_norm_is_per_token_so_a_doc_does_not_depend_on_its_batch(nlp):
    docs = annotated_docs(nlp, ["the bank of the river", "a completely different sentence , longer than the first one"])
    model = mix_v2(docs, layer_norm=True)
    together = model.predict(docs)
    for doc, out in zip(docs, together):
        numpy.testing.assert_array_equal(model.predict([doc])[0], out)
    # not what one mean and variance over the batch (bilm-tf, AllenNLP) would give
    layers = numpy.concatenate([doc._.elmo.layers for doc in docs], axis=1).astype("float64")
    batch_normalized = (layers - layers.mean(axis=(1, 2), keepdims=True)) / layers.std(axis=(1, 2), keepdims=True)
    assert not numpy.allclose(together[0], batch_normalized.mean(axis=0)[: len(docs[0])], atol=1e-3)


@pytest.mark.parametrize("layer_norm,l2_coef,dropout", [(False, 0.0, 0.0), (True, 0.0, 0.0), (False, 3.0, 0.0), (True, 2.0, 0.4)])
def test_v2_gradients_match_finite_differences(nlp, layer_norm, l2_coef, dropout):
    """d(loss)/d(s, gamma) for loss = sum(outputs * targets) + l2_coef * ||s||^2, dropout mask fixed by the seed."""
    docs = annotated_docs(nlp, ["the bank of the river", "cash", "  "])
    model = mix_v2(docs, layer_norm=layer_norm, l2_coef=l2_coef, dropout=dropout)
    model.set_param("scalars", numpy.asarray([0.3, -0.2, 0.5], dtype="f"))
    model.set_param("gamma_offset", numpy.asarray([0.5], dtype="f"))
    rng = numpy.random.default_rng(0)
    targets = [rng.normal(size=(len(doc), 12)).astype("f") for doc in docs]

    def loss() -> float:
        numpy.random.seed(7)  # thinc draws dropout masks from numpy's global generator
        outputs, _ = model.begin_update(docs)
        penalty = l2_coef * float((model.get_param("scalars").astype("float64") ** 2).sum())
        return float(sum((o.astype("float64") * t).sum() for o, t in zip(outputs, targets))) + penalty

    numpy.random.seed(7)
    outputs, backprop = model.begin_update(docs)
    if dropout:
        assert any((o == 0).sum() > (d._.elmo.mixed == 0).sum() for o, d in zip(outputs, docs))
    assert backprop(targets) == []
    assert_gradients_match_finite_differences(model, ("scalars", "gamma_offset"), loss, rel=5e-3, abs=2e-3)


def test_v2_dropout_is_its_own_and_only_in_training(nlp, tiny_model_dir):
    """spaCy sets every `dropout_rate` attr to [training] dropout; the ELMo dropout is not one."""
    from thinc.api import set_dropout_rate

    docs = annotated_docs(nlp, ["the bank of the river"])
    model = mix_v2(docs, dropout=0.5)
    set_dropout_rate(model, 0.1)
    assert model.attrs["elmo_dropout"] == 0.5
    numpy.random.seed(0)
    trained, _ = model.begin_update(docs)
    dropped = float((trained[0] == 0).mean() - (docs[0]._.elmo.mixed == 0).mean())
    assert 0.35 < dropped < 0.65
    kept = trained[0] != 0
    numpy.testing.assert_allclose(trained[0][kept], 2.0 * model.predict(docs)[0][kept], rtol=1e-5)


def test_weight_decay_pulls_gamma_toward_one_and_the_weights_toward_the_average(nlp):
    """spaCy's default optimizer (Adam, L2 = 0.01 as weight decay) on a mix with no task gradient."""
    from thinc.api import Adam

    docs = annotated_docs(nlp, ["the bank of the river"])
    model = mix_v2(docs)
    model.set_param("scalars", numpy.asarray([1.0, -1.0, 0.5], dtype="f"))
    model.set_param("gamma_offset", numpy.asarray([1.0], dtype="f"))  # gamma = 2
    optimizer = Adam(learn_rate=0.1, L2=0.5, L2_is_weight_decay=True)
    for _ in range(100):
        model.inc_grad("scalars", numpy.zeros(3, dtype="f"))
        model.inc_grad("gamma_offset", numpy.zeros(1, dtype="f"))
        model.finish_update(optimizer)
    assert abs(mix_gamma(model) - 1.0) < 0.02  # toward 1, not 0
    assert numpy.abs(model.get_param("scalars")).max() < 0.01


def test_v2_settings_are_checked():
    with pytest.raises(ValueError, match="dropout must be a number in"):
        ElmoScalarMix_v2(dropout=1.0)
    with pytest.raises(ValueError, match="l2_coef must be a finite number, not negative, got -0.1"):
        ElmoScalarMix_v2(l2_coef=-0.1)
    with pytest.raises(ValueError, match="width must be a positive integer, got 0"):
        WithElmo(ElmoScalarMix_v2(), ElmoScalarMix_v2(), width=0)
    with pytest.raises(ValueError, match="n_elmo_layers must be a positive integer"):
        ElmoScalarMix_v2(n_elmo_layers=0)
    with pytest.raises(ValueError, match="elmo_width must be a positive integer"):
        ElmoScalarMix(elmo_width=-3)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ElmoScalarMix_v2(dropout="0.1"), "spacy-elmo.ElmoScalarMix.v2: dropout must be a number in \\[0, 1\\), got '0.1'"),
        (lambda: ElmoScalarMix_v2(dropout=float("nan")), "dropout must be a number in \\[0, 1\\), got nan"),
        (lambda: ElmoScalarMix_v2(l2_coef=float("inf")), "l2_coef must be a finite number, not negative, got inf"),
        (lambda: ElmoScalarMix_v2(n_elmo_layers="3"), "n_elmo_layers must be a positive integer \\(or left out\\), got '3'"),
        (lambda: ElmoLayers(dropout="NaN"), "spacy-elmo.ElmoLayers.v1: dropout must be a number in \\[0, 1\\), got 'NaN'"),
        (lambda: WithElmo(ElmoScalarMix_v2(), ElmoScalarMix_v2(), width="96"), "spacy-elmo.WithElmo.v1: width must be a positive integer, got '96'"),
    ],
)
def test_a_quoted_or_non_finite_number_is_a_value_error_naming_the_setting(make, message):
    """What spaCy's config validation lets through: "0.1" passes as a float, the CLI's NaN arrives as a string."""
    with pytest.raises(ValueError, match=message):
        make()


def test_v2_empty_docs_whitespace_and_unannotated_docs(nlp, tiny_model_dir):
    docs = annotated_docs(nlp, ["", "  ", "a  b", "word"])
    model = mix_v2(docs, layer_norm=True)
    outputs = model.predict(docs)
    assert [o.shape for o in outputs] == [(0, 12), (1, 12), (3, 12), (1, 12)]
    assert all(numpy.isfinite(o).all() for o in outputs)
    numpy.testing.assert_array_equal(outputs[2][1], numpy.zeros(12, dtype="f"))  # the whitespace token
    _, backprop = model.begin_update(docs)
    backprop([numpy.ones_like(o) for o in outputs])
    assert numpy.isfinite(model.get_grad("scalars")).all()

    fresh = ElmoScalarMix_v2(n_elmo_layers=3, elmo_width=12)
    unannotated = [nlp.make_doc("not annotated yet"), nlp.make_doc("")]
    fresh.initialize(X=unannotated)
    assert [o.shape for o in fresh.predict(unannotated)] == [(3, 12), (0, 12)]
    with pytest.raises(ValueError, match="annotating_components"):
        fresh.begin_update(unannotated)  # in training, a doc without doc._.elmo is an error
    fresh.predict(docs)
    with pytest.raises(ValueError, match="needs doc._.elmo.layers"):
        fresh.predict(unannotated)  # once it has seen annotated docs, too


def test_with_elmo_concatenates_features_and_mix_then_maps_to_width(nlp):
    docs = annotated_docs(nlp, ["the bank of the river", "cash"])
    features = registry.resolve(
        {"m": {"@architectures": "spacy.MultiHashEmbed.v2", "width": 8, "attrs": ["NORM"], "rows": [100], "include_static_vectors": False}}
    )["m"]
    model = WithElmo(features, ElmoScalarMix_v2(dropout=0.0), width=10)
    model.initialize(X=docs)
    outputs = model.predict(docs)
    assert [o.shape for o in outputs] == [(5, 10), (1, 10)]
    combine = model.layers[1].layers[0]
    assert combine.get_dim("nI") == 8 + 12
    # the Maxout sees exactly [features; mix]
    concatenated = numpy.hstack([features.predict(docs)[0], model.layers[0].layers[1].predict(docs)[0]])
    numpy.testing.assert_allclose(outputs[0], combine.predict(concatenated), rtol=1e-6)
    _, backprop = model.begin_update(docs)
    backprop([numpy.ones_like(o) for o in outputs])
    mix = model.layers[0].layers[1]
    assert numpy.abs(mix.get_grad("gamma_offset")).sum() > 0


def test_v2_and_with_elmo_resolve_from_config_blocks():
    block = {
        "@architectures": "spacy-elmo.WithElmo.v1",
        "width": 16,
        "features": {"@architectures": "spacy.Tok2VecListener.v1", "width": 16, "upstream": "*"},
        "mix": {"@architectures": "spacy-elmo.ElmoScalarMix.v2", "dropout": 0.2, "l2_coef": 0.001, "layer_norm": True},
    }
    model = registry.resolve({"model": block})["model"]
    mix = next(node for node in model.walk() if node.name == "elmo_scalar_mix")
    assert (mix.attrs["elmo_dropout"], mix.attrs["l2_coef"], mix.attrs["layer_norm"]) == (0.2, 0.001, True)


def test_elmo_layers_puts_every_layer_side_by_side_token_layer_first(nlp):
    docs = annotated_docs(nlp, ["the bank of the river", "", "a  b"])
    model = ElmoLayers(dropout=0.0)
    model.initialize(X=docs)
    outputs = model.predict(docs)
    assert [o.shape for o in outputs] == [(5, 36), (0, 36), (3, 36)]
    layers = docs[0]._.elmo.layers  # (3, 5, 12)
    for token in range(5):
        numpy.testing.assert_array_equal(outputs[0][token], numpy.concatenate([layers[0, token], layers[1, token], layers[2, token]]))
    numpy.testing.assert_array_equal(outputs[2][1], numpy.zeros(36, dtype="f"))  # the whitespace token
    _, backprop = model.begin_update(docs)
    assert backprop([numpy.ones_like(o) for o in outputs]) == []  # nothing to learn, nothing upstream


def test_elmo_layers_dropout_is_its_own_and_only_in_training(nlp):
    from thinc.api import set_dropout_rate

    docs = annotated_docs(nlp, ["the bank of the river"])
    model = ElmoLayers(dropout=0.5)
    model.initialize(X=docs)
    set_dropout_rate(model, 0.1)
    numpy.random.seed(0)
    trained, _ = model.begin_update(docs)
    predicted = model.predict(docs)[0]
    assert 0.35 < float((trained[0] == 0).mean() - (predicted == 0).mean()) < 0.65
    kept = trained[0] != 0
    numpy.testing.assert_allclose(trained[0][kept], 2.0 * predicted[kept], rtol=1e-6)
    with pytest.raises(ValueError, match=r"spacy-elmo.ElmoLayers.v1: dropout must be a number in \[0, 1\), got 1.0"):
        ElmoLayers(dropout=1.0)


def test_a_tagger_learns_on_elmo_layers_whose_shape_comes_from_the_elmo_component(tiny_model_dir):
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    hash_embed = {"@architectures": "spacy.MultiHashEmbed.v2", "width": 8, "attrs": ["NORM"], "rows": [100], "include_static_vectors": False}
    tok2vec = {"@architectures": "spacy-elmo.WithElmo.v1", "width": 16, "features": hash_embed, "mix": {"@architectures": "spacy-elmo.ElmoLayers.v1"}}
    tagger = nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TRAIN]
    nlp.initialize(lambda: examples)  # the sample docs are not annotated: the shape comes from the component
    layers = next(node for node in tagger.model.walk() if node.name == "elmo_layers")
    assert (layers.get_dim("nL"), layers.get_dim("nW"), layers.get_dim("nO")) == (3, 12, 36)
    assert next(node for node in tagger.model.walk() if node.name.endswith("|elmo_layers")).get_dim("nO") == 8 + 36  # concatenate adds widths
    assert next(node for node in tagger.model.walk() if node.name == "maxout").get_dim("nI") == 8 + 36
    optimizer = Adam(0.02)
    losses_seen = []
    for _ in range(60):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses, annotates=["elmo"], exclude=["elmo"])
        losses_seen.append(losses["tagger"])
    assert losses_seen[-1] < 0.05 * losses_seen[0]
    assert [[t.tag_ for t in nlp(text)] for text, _ in TRAIN] == [tags for _, tags in TRAIN]


def test_elmo_layers_keeps_its_shape_once_initialized_and_after_a_round_trip(nlp):
    """The layer after it has weights for n_layers * elmo_width inputs: another biLM's shape
    is a clear error, not a shape error deep in thinc."""
    docs = annotated_docs(nlp, ["the bank of the river"])
    fresh = ElmoLayers()
    set_mix_dims(fresh, 2, 8, "component 'tok2vec'")  # a provisional shape may change
    set_mix_dims(fresh, 3, 12, "component 'tok2vec'")
    model = ElmoLayers()
    model.initialize(X=docs)
    with pytest.raises(
        ValueError,
        match="set up for 3 layers of width 12, but the elmo component's model gives 2 layers of width 8: its weights \\(or those of the layer after it\\)",
    ):
        set_mix_dims(model, 2, 8, "component 'tok2vec'")
    loaded = ElmoLayers().from_bytes(model.to_bytes())
    with pytest.raises(ValueError, match="set up for 3 layers of width 12"):
        set_mix_dims(loaded, 2, 8, "component 'tok2vec'")


def test_a_pipeline_saved_with_the_elmo_layers_width_in_nO_loads_and_tags_the_same(tiny_model_dir, tmp_path):
    """Pipelines trained before ElmoLayers had nW saved one layer's width as its nO; loading
    sets the saved dims after the elmo component has given the shape."""
    fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    hash_embed = {"@architectures": "spacy.MultiHashEmbed.v2", "width": 8, "attrs": ["NORM"], "rows": [100], "include_static_vectors": False}
    tok2vec = {"@architectures": "spacy-elmo.WithElmo.v1", "width": 16, "features": hash_embed, "mix": {"@architectures": "spacy-elmo.ElmoLayers.v1"}}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    examples = [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in TRAIN]
    nlp.initialize(lambda: examples)
    optimizer = Adam(0.02)
    for _ in range(5):
        nlp.update(examples, sgd=optimizer, annotates=["elmo"], exclude=["elmo"])
    texts = [text for text, _ in TRAIN]

    def tag_scores(pipeline):
        """(n_tokens, n_tags) per text: the tagger's scores on the elmo component's docs."""
        return pipeline.get_pipe("tagger").predict(list(pipeline.pipe(texts, disable=["tagger"])))

    expected = tag_scores(nlp)
    nlp.to_disk(tmp_path / "new")
    nlp.to_disk(tmp_path / "old")
    model_file = tmp_path / "old" / "tagger" / "model"
    saved = srsly.msgpack_loads(model_file.read_bytes())
    (node,) = [node for node in saved["nodes"] if node["name"] == "elmo_layers"]
    assert node["dims"] == {"nL": 3, "nW": 12, "nO": 36}
    node["dims"] = {"nL": 3, "nO": 12}  # as saved before nW
    model_file.write_bytes(srsly.msgpack_dumps(saved))
    for folder in ("new", "old"):
        loaded = spacy.load(tmp_path / folder)
        for got, want in zip(tag_scores(loaded), expected, strict=True):
            numpy.testing.assert_array_equal(got, want)
        layers = next(node for node in loaded.get_pipe("tagger").model.walk() if node.name == "elmo_layers")
        assert (layers.get_dim("nL"), layers.get_dim("nW"), layers.get_dim("nO")) == (3, 12, 36)


def test_elmo_layers_saved_with_the_layer_width_in_nO_loads_and_gives_the_same_outputs(nlp):
    """Before nW, ElmoLayers kept one layer's width in nO (its output is n_layers times
    wider): such a saved model reads its layers the same, and says its output width."""
    docs = annotated_docs(nlp, ["the bank of the river", "a b"])
    model = ElmoLayers(dropout=0.0)
    model.initialize(X=docs)
    saved = model.to_dict()
    node = saved["nodes"][0]
    node["dims"] = {"nL": 3, "nO": 12}  # the dims as they were saved then
    for fresh_from_config in (True, False):
        loaded = ElmoLayers(dropout=0.0).from_dict(saved)
        if not fresh_from_config:  # a pipeline being loaded: the elmo component gives the shape
            set_mix_dims(loaded, 3, 12, "component 'tok2vec'")
        for got, want in zip(loaded.predict(docs), model.predict(docs)):
            numpy.testing.assert_array_equal(got, want)
        assert (loaded.get_dim("nL"), loaded.get_dim("nW"), loaded.get_dim("nO")) == (3, 12, 36)
    with pytest.raises(ValueError, match="set up for 3 layers of width 12"):
        set_mix_dims(ElmoLayers().from_dict(saved), 3, 8, "component 'tok2vec'")
