"""Helpers shared by the tests: paths to the reference data and small random models."""
from pathlib import Path

import pytest
import torch

from spacy_elmo.nn import BiLM, BiLMConfig

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
GOLDEN = SHARED / "fixtures" / "elmo-golden"


def golden_dir(name: str) -> Path:
    path = GOLDEN / name
    if not (path / "lm_weights.hdf5").is_file():
        pytest.skip(f"golden ELMo fixtures not found at {path} (expected ../shared beside the repository)")
    return path


TINY_SETTINGS = dict(
    filters=((1, 4), (2, 8), (3, 16)),
    char_embedding_dim=4,
    n_highway=1,
    lstm_dim=12,
    projection_dim=6,
    n_layers=2,
)
"""A biLM small enough for fast tests (P = 6, so layers are 12 wide)."""
TINY_CONFIG = BiLMConfig(**TINY_SETTINGS)


def random_bilm(config: BiLMConfig = TINY_CONFIG, seed: int = 0) -> BiLM:
    """A biLM with seeded random weights large enough that the clipping is active."""
    torch.manual_seed(seed)
    bilm = BiLM(config)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.5)
        bilm.token_encoder.char_embedding.weight[0] = 0.0  # the padded-token row, as in every real model
    return bilm.eval()
