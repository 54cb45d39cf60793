"""Helpers shared by the tests: paths to the reference data and small random models."""

import errno
import os
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


TINY_WORD_CONFIG = BiLMConfig(token_encoder="words", **TINY_SETTINGS)
WORDS = ("<S>", "</S>", "<UNK>", "the", "bank", "river", "money", "a", "sat", "by", ".")


def random_word_bilm(words=WORDS, seed: int = 0) -> BiLM:
    """A word-level biLM over `words` with seeded random weights (clipping active)."""
    torch.manual_seed(seed)
    bilm = BiLM(TINY_WORD_CONFIG, words)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.5)
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
        "schedule.decay": "constant",  # the demo's decay spans max_seconds, which is off here
        "batching.tokens_per_batch": 256,
        "batching.bucket_batches": 4,
        "training.max_seconds": 0,
        "training.max_steps": 30,
        "training.eval_every": 10,
        "training.checkpoint_every": 10,
        "training.log_every": 1,
        "training.num_threads": 1,
        "training.mixed_precision": False,  # the demo config's "auto" is bf16 on some CPUs
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


TAGGED = [
    ("I like green eggs", ["PRP", "VBP", "JJ", "NNS"], ["PRON", "VERB", "ADJ", "NOUN"]),
    ("Eat blue ham", ["VB", "JJ", "NN"], ["VERB", "ADJ", "NOUN"]),
    ("They sat by the bank", ["PRP", "VBD", "IN", "DT", "NN"], ["PRON", "VERB", "ADP", "DET", "NOUN"]),
    ("The bank approved the loan", ["DT", "NN", "VBD", "DT", "NN"], ["DET", "NOUN", "VERB", "DET", "NOUN"]),
]
"""Sentences with XPOS tags and UPOS, for training small taggers and morphologizers."""


def tagged_examples(nlp):
    from spacy.training import Example

    return [Example.from_dict(nlp.make_doc(text), {"tags": tags, "pos": pos}) for text, tags, pos in TAGGED]


def hash_embed(width: int) -> dict:
    return {"@architectures": "spacy.MultiHashEmbed.v2", "width": width, "attrs": ["NORM", "PREFIX"], "rows": [500, 100], "include_static_vectors": False}


def elmo_mix(**settings) -> dict:
    return {"@architectures": "spacy-elmo.ElmoScalarMix.v2", "dropout": 0.0, **settings}


def with_elmo(features: dict, width: int, **mix) -> dict:
    return {"@architectures": "spacy-elmo.WithElmo.v1", "width": width, "features": features, "mix": elmo_mix(**mix)}


def listener(width: int) -> dict:
    return {"@architectures": "spacy.Tok2VecListener.v1", "width": width, "upstream": "*"}


def elmo_tagging_pipeline(model_dir: Path, per_task: bool = False, width: int = 16, components=("tagger", "morphologizer")):
    """elmo + tok2vec + tagger and morphologizer listening to it. ELMo enters the shared tok2vec
    (concatenated to hash embeddings), or, with `per_task`, each component concatenates its
    own mix to its listener's output."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(model_dir)})
    embed = hash_embed(width) if per_task else with_elmo(hash_embed(width), width)
    encode = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": width, "depth": 1, "window_size": 1, "maxout_pieces": 3}
    nlp.add_pipe("tok2vec", config={"model": {"@architectures": "spacy.Tok2Vec.v2", "embed": embed, "encode": encode}})
    for name in components:
        tok2vec = with_elmo(listener(width), width) if per_task else listener(width)
        nlp.add_pipe(name, config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec}})
    return nlp


def train_pipeline(nlp, steps: int = 40, learn_rate: float = 0.02):
    """Initialize on `tagged_examples` and update `steps` times with elmo frozen and annotating."""
    from thinc.api import Adam, fix_random_seed

    fix_random_seed(0)
    examples = tagged_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = Adam(learn_rate)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer, annotates=["elmo"], exclude=["elmo"])
    return nlp


def copy_project(project: Path) -> Path:
    """A new folder holding the spaCy project's own files (project.yml, configs, scripts)."""
    import shutil

    project.mkdir(parents=True)
    for name in ("project.yml", "configs", "scripts"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, project / name)
    return project


def project_run(project: Path, command: str, *args: str) -> str:
    """`spacy project run COMMAND PROJECT ARGS...`; its stdout, or a failure showing its end."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "spacy", "project", "run", command, str(project), *args], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def no_space() -> OSError:
    """The error of a write to a full disk."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fill_the_disk_before_renames(monkeypatch) -> None:
    """From now on in the test, every staged write (`spacy_elmo.io.staging`) fails as on a
    full disk when its staging file is flushed, before it is renamed into place."""

    def full_disk(path):
        raise no_space()

    monkeypatch.setattr("spacy_elmo.io.staging._fsync_path", full_disk)


def kept_after_a_failed_write(path: Path, before: str) -> bool:
    """Whether `path` still holds `before` and no staging file was left beside it."""
    return path.read_text(encoding="utf-8") == before and not list(path.parent.glob(f".{path.name}.staging-*"))


def fill_the_disk_at_dataset(monkeypatch, n: int) -> None:
    """From now on in the test, the n-th HDF5 dataset created fails as on a full disk."""
    import h5py

    real_create = h5py.Group.create_dataset
    created = []

    def create_then_fill_the_disk(group, name, *args, **kwargs):
        created.append(name)
        if len(created) == n:
            raise no_space()
        return real_create(group, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", create_then_fill_the_disk)
