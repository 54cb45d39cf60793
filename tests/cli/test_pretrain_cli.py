"""`pretrain`, `evaluate` and `assemble` on the command line."""

import json
import re

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from elmo_testing import fill_the_disk_before_renames, kept_after_a_failed_write, plain, write_tiny_pretrain_config
from spacy_elmo.cli import app
from spacy_elmo.io import load_model
from spacy_elmo.nn import batch_to_char_ids
from spacy_elmo.training.checkpoint import load_trained_model
from spacy_elmo.training.data import read_sentences
from spacy_elmo.training.perplexity import perplexity

runner = CliRunner()


def test_pretrain_then_evaluate_then_assemble(toy_corpus, tmp_path, monkeypatch):
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, max_steps=6, eval_every=3, checkpoint_every=3)
    result = runner.invoke(app, ["pretrain", str(config), str(tmp_path / "out"), "--no-progress", "--training.max_steps", "4"])
    assert result.exit_code == 0, result.output
    assert re.search(r"Trained 4 steps, [\d,]+ tokens .* best dev perplexity \d+\.\d\d at step 4", plain(result.output))

    output = tmp_path / "metrics" / "test.json"
    result = runner.invoke(app, ["evaluate", str(tmp_path / "out" / "model-best"), str(toy_corpus / "test.txt"), "--output", str(output)])
    assert result.exit_code == 0, result.output
    figures = json.loads(output.read_text())
    objective, vocab = load_trained_model(tmp_path / "out" / "model-best")
    expected = perplexity(objective, read_sentences(toy_corpus / "test.txt", 64), vocab)  # as in training
    assert figures["mean"] == expected.mean and figures["forward"] == expected.forward
    assert figures["sentences"] == len((toy_corpus / "test.txt").read_text().splitlines())
    at_own = tmp_path / "metrics" / "at-own-vocab.json"
    own_vocab = ["--vocab", str(toy_corpus / "vocab.txt"), "--output", str(at_own)]
    result = runner.invoke(app, ["evaluate", str(tmp_path / "out" / "model-best"), str(toy_corpus / "test.txt"), *own_vocab])
    assert result.exit_code == 0, result.output
    assert json.loads(at_own.read_text())["mean"] == pytest.approx(figures["mean"], rel=1e-6)
    (tmp_path / "wider.txt").write_text((toy_corpus / "vocab.txt").read_text() + "zebra-word\n", encoding="utf-8")
    result = runner.invoke(app, ["evaluate", str(tmp_path / "out" / "model-best"), str(toy_corpus / "test.txt"), "--vocab", str(tmp_path / "wider.txt")])
    assert result.exit_code == 2 and "the vocabulary to score at holds 1 word(s) the model's lacks (zebra-word): it gives them" in plain(result.output)
    (tmp_path / "long.txt").write_text(" ".join(["the", "cat", "sees", "the", "bank"] * 16) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["evaluate", str(tmp_path / "out" / "model-best"), str(tmp_path / "long.txt"), "--output", str(output)])
    assert result.exit_code == 0, result.output
    assert json.loads(output.read_text())["sentences"] == 2  # 80 tokens in pieces of 64, as in training
    before = output.read_text()
    with monkeypatch.context() as disk:
        fill_the_disk_before_renames(disk)
        result = runner.invoke(app, ["evaluate", str(tmp_path / "out" / "model-best"), str(toy_corpus / "test.txt"), "--output", str(output)])
    assert result.exit_code == 2 and "could not be written (No space left on device)" in plain(result.output)
    assert kept_after_a_failed_write(output, before)

    result = runner.invoke(app, ["assemble", str(tmp_path / "out" / "model-best"), str(tmp_path / "pipe"), "--name", "toy", "--version", "1.2.3"])
    assert result.exit_code == 0, result.output
    nlp = spacy.load(tmp_path / "pipe")
    assert nlp.pipe_names == ["sentencizer", "elmo"] and nlp.meta["version"] == "1.2.3"
    doc = nlp("The cat sees the bank .")
    bilm = load_model(tmp_path / "out" / "model-best")
    expected_layers = bilm(__import__("torch").from_numpy(batch_to_char_ids([[t.text for t in doc]])), [len(doc)]).layers[:, 0]
    numpy.testing.assert_allclose(doc._.elmo.layers, expected_layers.detach().numpy(), atol=1e-6)


def test_pretrain_refuses_to_clobber_and_reports_bad_settings(toy_corpus, tmp_path):
    config = write_tiny_pretrain_config(tmp_path / "tiny.cfg", toy_corpus, max_steps=2)
    assert runner.invoke(app, ["pretrain", str(config), str(tmp_path / "out"), "--no-progress"]).exit_code == 0
    again = runner.invoke(app, ["pretrain", str(config), str(tmp_path / "out"), "--no-progress"])
    assert again.exit_code == 2 and "--resume" in plain(again.output)
    overwritten = runner.invoke(app, ["pretrain", str(config), str(tmp_path / "out"), "--no-progress", "--overwrite"])
    assert overwritten.exit_code == 0, overwritten.output
    both = runner.invoke(app, ["pretrain", str(config), str(tmp_path / "out"), "--resume", "--overwrite"])
    assert both.exit_code == 2 and "exclude each other" in plain(both.output)
    typo = runner.invoke(app, ["pretrain", str(config), str(tmp_path / "x"), "--training.max_step", "3"])
    assert typo.exit_code == 2 and "[training] unknown key 'max_step'" in plain(typo.output)


def test_evaluate_needs_a_pretraining_model_directory(tiny_model_dir, toy_corpus):
    result = runner.invoke(app, ["evaluate", str(tiny_model_dir), str(toy_corpus / "test.txt")])
    assert result.exit_code == 2 and "no language-model softmax" in plain(result.output)
