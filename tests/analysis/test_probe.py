"""Linear probes: planted signals are found, absent ones are not, and the CLI end to end."""

import json

import numpy
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from elmo_testing import fill_the_disk_before_renames, kept_after_a_failed_write, plain
from spacy_elmo.analysis.probe import (
    LinearProbe,
    MostFrequentLabel,
    TokenFeatures,
    collect_features,
    run_probes,
    split_docs,
)
from spacy_elmo.analysis.vectors import elmo_pipeline
from spacy_elmo.cli import app


def planted(n: int, dim: int, n_classes: int, seed: int):
    """Features (n, dim) and labels that are the argmax of a random linear map of them."""
    rng = numpy.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(numpy.float32)
    w = rng.normal(size=(dim, n_classes))
    return x, [f"c{k}" for k in (x @ w).argmax(axis=1)]


def test_probe_recovers_a_linear_label():
    x, y = planted(3000, 16, 4, seed=0)
    classes = sorted(set(y))
    probe = LinearProbe.fit(x[:2000], y[:2000], classes)
    assert probe.accuracy(x[2000:], y[2000:]) > 0.95


def test_probe_does_not_find_an_absent_label():
    x, _ = planted(3000, 16, 4, seed=0)
    rng = numpy.random.default_rng(1)
    y = [f"c{k}" for k in rng.integers(0, 4, size=3000)]
    probe = LinearProbe.fit(x[:2000], y[:2000], sorted(set(y)))
    assert probe.accuracy(x[2000:], y[2000:]) < 0.33  # chance is 0.25


def test_probe_is_deterministic():
    x, y = planted(500, 8, 3, seed=2)
    a = LinearProbe.fit(x, y, sorted(set(y)))
    b = LinearProbe.fit(x, y, sorted(set(y)))
    numpy.testing.assert_array_equal(a.weight, b.weight)


def test_most_frequent_label_per_word_with_a_fallback_for_unseen_words():
    baseline = MostFrequentLabel.fit(["a", "a", "a", "b", "b"], ["X", "X", "Y", "Y", "Y"])
    assert baseline.by_word == {"a": "X", "b": "Y"}
    assert baseline.fallback == "Y"
    assert baseline.accuracy(["a", "b", "unseen"], ["X", "X", "Y"]) == pytest.approx(2 / 3)


def test_run_probes_reads_the_layer_that_holds_the_signal():
    """Layer 1 holds a planted label, layer 0 only noise; the words carry no information."""
    x, y = planted(2500, 16, 3, seed=3)
    noise = numpy.random.default_rng(4).normal(size=x.shape).astype(numpy.float32)

    def features(rows):
        return TokenFeatures([noise[rows], x[rows], noise[rows]], ["w"] * len(rows), {"tag": [y[i] for i in rows]})

    report = run_probes(features(range(2000)), features(range(2000, 2500)), ["tag"])
    result = report.labels["tag"]
    assert report.layers == ["layer 0", "layer 1", "mix"]
    assert result.accuracy[1] > 0.9
    assert result.accuracy[0] < 0.6 and result.accuracy[2] < 0.6
    assert result.baseline == pytest.approx(max(y[2000:].count(c) for c in set(y)) / 500, abs=0.2)
    assert (result.n_train, result.n_eval, result.n_classes) == (2000, 500, 3)


def test_split_docs_is_seeded_and_disjoint():
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(f"doc {i}") for i in range(10)]
    train, held_out = split_docs(docs, 0.3, seed=0)
    assert len(held_out) == 3 and len(train) == 7
    assert {d.text for d in train}.isdisjoint(d.text for d in held_out)
    assert [d.text for d in split_docs(docs, 0.3, seed=0)[1]] == [d.text for d in held_out]
    with pytest.raises(ValueError, match="eval_fraction"):
        split_docs(docs, 1.0, seed=0)


WORD_TAGS = {"the": "DT", "a": "DT", "cat": "NN", "dog": "NN", "sat": "VB", "ran": "VB", ".": "."}


def tagged_docs(nlp, n: int, seed: int, random_tags: bool):
    """Sentences of WORD_TAGS' words; tags follow the word, or are random."""
    rng = numpy.random.default_rng(seed)
    words = list(WORD_TAGS)
    docs = []
    for _ in range(n):
        tokens = [words[k] for k in rng.integers(0, len(words), size=6)]
        tags = [str(rng.choice(["A", "B"])) if random_tags else WORD_TAGS[w] for w in tokens]
        docs.append(Doc(nlp.vocab, words=tokens, tags=tags))
    return docs


def test_collect_features_keeps_one_row_per_non_space_token(tiny_model_dir):
    nlp = elmo_pipeline(tiny_model_dir)
    doc = Doc(nlp.vocab, words=["a", " ", "cat"], spaces=[True, False, False], tags=["DT", "_SP", "NN"])
    features = collect_features(nlp, [doc], ["tag", "pos"])
    assert features.words == ["a", "cat"]
    assert features.labels == {"tag": ["DT", "NN"], "pos": [None, None]}  # POS is not annotated
    assert len(features.layers) == 3 + 1  # the tiny model's 3 output layers, then the mix
    assert all(layer.shape == (2, 12) for layer in features.layers)


def test_probe_on_a_real_model_recovers_a_word_level_tag_not_a_random_one(tiny_model_dir):
    nlp = elmo_pipeline(tiny_model_dir)
    fit = collect_features(nlp, tagged_docs(nlp, 60, 0, random_tags=False), ["tag"])
    held_out = collect_features(nlp, tagged_docs(nlp, 20, 1, random_tags=False), ["tag"])
    word_level = run_probes(fit, held_out, ["tag"]).labels["tag"]
    assert word_level.accuracy[0] == 1.0  # layer 0 is a function of the word

    fit = collect_features(nlp, tagged_docs(nlp, 60, 0, random_tags=True), ["tag"])
    held_out = collect_features(nlp, tagged_docs(nlp, 20, 1, random_tags=True), ["tag"])
    absent = run_probes(fit, held_out, ["tag"]).labels["tag"]
    assert max(absent.accuracy) < 0.7  # chance is 0.5


def test_probe_cli_prints_the_table_and_writes_json(tiny_model_dir, tmp_path, monkeypatch):
    nlp = spacy.blank("en")
    train_path, eval_path = tmp_path / "train.spacy", tmp_path / "dev.spacy"
    DocBin(docs=tagged_docs(nlp, 40, 0, random_tags=False)).to_disk(train_path)
    DocBin(docs=tagged_docs(nlp, 10, 1, random_tags=False)).to_disk(eval_path)
    output = tmp_path / "probe.json"
    result = CliRunner().invoke(app, ["probe", str(tiny_model_dir), str(train_path), "--eval", str(eval_path), "--labels", "tag", "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert "| `tag` | 4 | 240 | 60 | 100.00 |" in result.output
    record = json.loads(output.read_text())
    assert record["layers"] == ["layer 0", "layer 1", "layer 2", "mix"]
    assert record["labels"]["tag"]["accuracy"][0] == 1.0
    before = output.read_text()
    fill_the_disk_before_renames(monkeypatch)
    result = CliRunner().invoke(app, ["probe", str(tiny_model_dir), str(train_path), "--eval", str(eval_path), "--labels", "tag", "--output", str(output)])
    assert result.exit_code == 2 and "could not be written (No space left on device)" in plain(result.output)
    assert kept_after_a_failed_write(output, before)


def test_probe_cli_errors_clearly(tiny_model_dir, tmp_path):
    nlp = spacy.blank("en")
    data = tmp_path / "train.spacy"
    DocBin(docs=tagged_docs(nlp, 5, 0, random_tags=False)).to_disk(data)
    runner = CliRunner()
    result = runner.invoke(app, ["probe", str(tiny_model_dir), str(data), "--labels", "lemma"])
    assert result.exit_code != 0 and "labels must be some of" in result.output
    result = runner.invoke(app, ["probe", str(tiny_model_dir), str(tmp_path / "missing.spacy")])
    assert result.exit_code != 0 and "file not found" in result.output
    result = runner.invoke(app, ["probe", str(tiny_model_dir), str(data), "--labels", "dep"])
    assert result.exit_code != 0 and "carries none of the labels" in result.output
