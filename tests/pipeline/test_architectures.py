"""`spacy-elmo.ElmoScalarMix.v1`: a learned per-task layer mix for downstream components."""
import numpy
import pytest
import spacy
from spacy.training import Example
from spacy.util import registry
from thinc.api import Adam, fix_random_seed

from spacy_elmo.pipeline.architectures import ElmoScalarMix

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
    grads = {name: model.get_grad(name).copy() for name in ("scalars", "gamma")}
    for name in ("scalars", "gamma"):
        param = model.get_param(name).astype("float64")
        for k in range(param.shape[0]):
            shifted = []
            for eps in (1e-3, -1e-3):
                value = param.copy()
                value[k] += eps
                model.set_param(name, value.astype("f"))
                shifted.append(loss())
            model.set_param(name, param.astype("f"))
            assert grads[name][k] == pytest.approx((shifted[0] - shifted[1]) / 2e-3, rel=2e-2, abs=1e-3)


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
        sys.executable, "-m", "spacy", "train", str(config), "-o", str(tmp_path / "out"),
        "--paths.train", str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "train.spacy"),
        "--paths.elmo", str(tiny_model_dir), "--components.tagger.model.tok2vec.elmo_width", "12",
        "--training.max_steps", "30", "--training.eval_frequency", "10",
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
