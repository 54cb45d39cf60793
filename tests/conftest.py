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


@pytest.fixture
def nlp(tiny_model_dir):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tiny_model_dir)})
    return nlp
