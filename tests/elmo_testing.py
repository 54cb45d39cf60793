"""Helpers shared by the tests: paths to the reference data and small random models."""
import re
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


REPO = Path(__file__).resolve().parents[1]
DEMO_PRETRAIN_CONFIG = REPO / "configs" / "pretrain-demo.cfg"


def write_toy_text(path: Path, n_sentences: int = 300, seed: int = 0) -> Path:
    """A small text from a toy grammar (a few dozen words), learnable in a few steps."""
    import random

    rng = random.Random(seed)
    subjects = ["the cat", "a dog", "the old man", "my sister", "the river", "a bird"]
    verbs = ["sees", "likes", "follows", "finds", "watches"]
    objects = ["the bank", "a tree", "the ball", "her friend", "the water", "a house"]
    endings = [".", "!", "today .", "again ."]
    lines = []
    for _ in range(n_sentences // 2):
        pair = [f"{rng.choice(subjects).capitalize()} {rng.choice(verbs)} {rng.choice(objects)} {rng.choice(endings)}" for _ in range(2)]
        lines.append(" ".join(pair))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_pretrain_overrides(corpus_dir: Path, **training) -> dict:
    """Overrides of configs/pretrain-demo.cfg for a tiny, fast, single-threaded training."""
    overrides = {
        "paths.corpus": str(corpus_dir),
        "model.filters": [list(f) for f in TINY_SETTINGS["filters"]],
        "model.char_embedding_dim": TINY_SETTINGS["char_embedding_dim"],
        "model.lstm_dim": 16,
        "model.projection_dim": 8,
        "head.type": "full",
        "optimizer.learning_rate": 0.01,
        "schedule.warmup_steps": 0,
        "batching.tokens_per_batch": 256,
        "batching.bucket_batches": 4,
        "training.max_seconds": 0,
        "training.max_steps": 30,
        "training.eval_every": 10,
        "training.checkpoint_every": 10,
        "training.log_every": 1,
        "training.num_threads": 1,
    }
    overrides.update({f"training.{key}": value for key, value in training.items()})
    return overrides


def write_tiny_pretrain_config(path: Path, corpus_dir: Path, extra: dict = None, **training) -> Path:
    """configs/pretrain-demo.cfg with `tiny_pretrain_overrides` (and `extra`) applied, as a file."""
    from thinc.api import Config

    overrides = {**tiny_pretrain_overrides(corpus_dir, **training), **(extra or {})}
    Config().from_disk(DEMO_PRETRAIN_CONFIG, overrides=overrides).to_disk(path)
    return path


def plain(output: str) -> str:
    """CLI output without rich's box drawing and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


def install_in_fresh_venv(venv: Path, sdist: Path) -> Path:
    """A new venv with this repository and the packaged pipeline `sdist` installed; its python."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0", str(REPO)], check=True, timeout=1200)
    subprocess.run(pip + [str(sdist)], check=True, timeout=600)
    return venv / "bin" / "python"


def saved_weights(model_dir: Path) -> dict:
    """The arrays of a model directory's weights.npz."""
    import numpy

    with numpy.load(model_dir / "weights.npz") as archive:
        return {name: archive[name] for name in archive.files}


def metric_records(output_dir: Path) -> list:
    """The JSON lines of a training's metrics.jsonl."""
    import json

    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
