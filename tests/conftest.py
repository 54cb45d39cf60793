"""Fixtures for the reference data in ../shared."""

from pathlib import Path

import pytest

from elmo_testing import golden_dir


@pytest.fixture
def allennlp_fixture() -> Path:
    return golden_dir("allennlp")


@pytest.fixture
def bilm_tf_fixture() -> Path:
    return golden_dir("bilm-tf")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A spacy-elmo model directory holding a tiny biLM with seeded random weights."""
    from elmo_testing import random_bilm
    from spacy_elmo.io import save_model

    path = tmp_path_factory.mktemp("tiny") / "bilm"
    save_model(random_bilm(), path)
    return path


@pytest.fixture(scope="session")
def tiny_word_model_dir(tmp_path_factory) -> Path:
    """A spacy-elmo model directory holding a tiny word-level biLM with seeded random weights."""
    from elmo_testing import random_word_bilm
    from spacy_elmo.io import save_model

    path = tmp_path_factory.mktemp("tiny-words") / "bilm"
    save_model(random_word_bilm(), path)
    return path


@pytest.fixture(scope="session")
def trained_pipeline(tiny_model_dir, tmp_path_factory) -> Path:
    """A saved pipeline whose tagger and morphologizer each trained their own ELMo mix."""
    from elmo_testing import elmo_tagging_pipeline, train_pipeline

    nlp = train_pipeline(elmo_tagging_pipeline(tiny_model_dir, per_task=True), steps=30)
    path = tmp_path_factory.mktemp("trained") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture
def nlp(tiny_model_dir):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    return nlp


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> Path:
    """A prepared corpus (train shards, dev, test, vocab) of a toy grammar's sentences."""
    from elmo_testing import write_toy_text
    from spacy_elmo.training.corpus import prepare_corpus

    root = tmp_path_factory.mktemp("toy")
    prepare_corpus(write_toy_text(root / "toy.txt"), root / "corpus", seed=0, dev_fraction=0.1, test_fraction=0.1, sentences_per_shard=100)
    return root / "corpus"
