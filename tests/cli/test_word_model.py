"""The word-level biLM end to end: pretrain, evaluate, assemble, the component and its
similarity, resume, --init-from onto other text, and a clear refusal to export."""

import json
import shutil

import numpy
import pytest
import spacy
import torch
from typer.testing import CliRunner

from elmo_testing import metric_records, plain, saved_weights, write_tiny_pretrain_config
from spacy_elmo.cli import app
from spacy_elmo.io import load_model
from spacy_elmo.training.checkpoint import load_checkpoint, load_trained_model
from spacy_elmo.training.data import Vocabulary, read_sentences
from spacy_elmo.training.perplexity import perplexity

runner = CliRunner()
WORDS = {"model.token_encoder": "words"}


def pretrain(config, out, *extra):
    result = runner.invoke(app, ["pretrain", str(config), str(out), "--no-progress", *map(str, extra)])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def word_training(toy_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("words")
    config = write_tiny_pretrain_config(root / "words.cfg", toy_corpus, WORDS, max_steps=8, eval_every=4, checkpoint_every=4)
    pretrain(config, root / "out")
    return config, root / "out"


def test_a_word_model_trains_and_keeps_its_vocabulary(word_training, toy_corpus):
    _, out = word_training
    dev = [r["dev_mean"] for r in metric_records(out) if "dev_mean" in r]
    assert len(dev) == 2 and dev[1] < dev[0]
    model = out / "model-best"
    assert json.loads((model / "words.json").read_text(encoding="utf-8")) == Vocabulary.from_file(toy_corpus / "vocab.txt").tokens
    bilm = load_model(model)
    assert bilm.config.token_encoder == "words" and bilm.words[:3] == ("<S>", "</S>", "<UNK>")
    assert load_checkpoint(out / "checkpoints" / "last.pt")["words"] == list(bilm.words)


def test_info_names_the_encoder_and_the_vocabulary_size(word_training, toy_corpus):
    _, out = word_training
    result = runner.invoke(app, ["info", str(out / "model-best")])
    assert result.exit_code == 0, result.output
    n_words = len(Vocabulary.from_file(toy_corpus / "vocab.txt"))
    assert "token_encoder              words" in result.output and f"words                      {n_words:,}" in result.output


def test_evaluate_scores_a_word_model_exactly(word_training, toy_corpus, tmp_path):
    _, out = word_training
    result = runner.invoke(app, ["evaluate", str(out / "model-best"), str(toy_corpus / "test.txt"), "--output", str(tmp_path / "test.json")])
    assert result.exit_code == 0, result.output
    objective, vocab = load_trained_model(out / "model-best")
    expected = perplexity(objective, read_sentences(toy_corpus / "test.txt", 64), vocab)
    assert json.loads((tmp_path / "test.json").read_text())["mean"] == expected.mean


def test_an_assembled_word_pipeline_gives_the_model_s_contextual_vectors(word_training, tmp_path):
    _, out = word_training
    result = runner.invoke(app, ["assemble", str(out / "model-best"), str(tmp_path / "pipe"), "--name", "toy_words"])
    assert result.exit_code == 0, result.output
    nlp = spacy.load(tmp_path / "pipe")
    doc = nlp("The cat sees the bank . A zebra sees the bank .")
    bilm = load_model(out / "model-best")
    for sentence in doc.sents:
        tokens = [t.text for t in sentence]
        with torch.no_grad():
            expected = bilm(bilm.input_ids([tokens]), [len(tokens)]).layers[:, 0].numpy()
        numpy.testing.assert_allclose(doc._.elmo.layers[:, sentence.start : sentence.end], expected, atol=1e-6)
    first, second = doc[4], doc[10]
    assert first.text == second.text == "bank"
    assert first.similarity(second) < 0.9999  # contextual: the same word in other contexts differs
    assert first.similarity(doc[4]) == pytest.approx(1.0)
    again = spacy.load(tmp_path / "pipe").from_bytes(nlp.to_bytes())
    numpy.testing.assert_array_equal(again(doc.text)._.elmo.layers, doc._.elmo.layers)


def test_export_refuses_a_word_model_and_writes_nothing(word_training, tmp_path):
    _, out = word_training
    result = runner.invoke(app, ["export", str(out / "model-best"), str(tmp_path / "public")])
    assert result.exit_code == 2
    assert "public ELMo format holds char-CNN biLMs only; this one has token_encoder 'words'" in plain(result.output)
    assert not (tmp_path / "public").exists()


def test_a_resumed_word_training_equals_one_longer_run(toy_corpus, tmp_path):
    config = write_tiny_pretrain_config(tmp_path / "words.cfg", toy_corpus, WORDS, max_steps=6, eval_every=3, checkpoint_every=3)
    pretrain(config, tmp_path / "straight")
    pretrain(config, tmp_path / "resumed", "--training.max_steps", 3)
    pretrain(config, tmp_path / "resumed", "--resume")
    straight, resumed = saved_weights(tmp_path / "straight" / "model-last"), saved_weights(tmp_path / "resumed" / "model-last")
    assert sorted(straight) == sorted(resumed) and all(numpy.array_equal(straight[k], resumed[k]) for k in straight)


def test_init_from_a_word_model_keeps_its_word_table_on_text_with_another_vocabulary(word_training, toy_corpus, tmp_path):
    """Adapting: the input table stays the model's (new words read as <UNK>), the softmax
    takes the new corpus's vocabulary, and a resume rebuilds the same table."""
    config, out = word_training
    source = load_model(out / "model-best")
    corpus = tmp_path / "corpus"
    shutil.copytree(toy_corpus, corpus)
    tokens = Vocabulary.from_file(toy_corpus / "vocab.txt").tokens
    (corpus / "vocab.txt").write_text("".join(t + "\n" for t in [*tokens[:3], "unseen-word", *tokens[3:8]]), encoding="utf-8")
    pretrain(config, tmp_path / "adapted", "--paths.corpus", corpus, "--init-from", out / "model-best", "--training.max_steps", 2)
    adapted, vocab = load_trained_model(tmp_path / "adapted" / "model-last")
    assert adapted.bilm.words == source.words and len(vocab) == 9
    pretrain(config, tmp_path / "adapted", "--paths.corpus", corpus, "--init-from", out / "model-best", "--training.max_steps", 4, "--resume")
    assert load_model(tmp_path / "adapted" / "model-last").words == source.words
