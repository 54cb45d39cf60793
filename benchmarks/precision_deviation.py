"""Deviation of the bf16 and int8 modes from exact fp32 on a trained model and real text.

Uses the tiny trained public-format model in ../shared/fixtures/elmo-golden/allennlp and
the first 300 UD English EWT sentences of 5-40 tokens; prints the max absolute difference
and the mean / min cosine over all token vectors of all layers. Run by hand:

    python benchmarks/precision_deviation.py
"""

from pathlib import Path

import torch
from embed_speed import load_sentences

from spacy_elmo.io import load_public_model
from spacy_elmo.nn.embedder import Embedder

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "elmo-golden" / "allennlp"


def main() -> None:
    bilm = load_public_model(GOLDEN / "options.json", GOLDEN / "lm_weights.hdf5")
    sentences = load_sentences(300)
    exact = Embedder(bilm)
    for precision in ("bf16", "int8"):
        approximate = Embedder(bilm, precision=precision)
        a, b = [], []
        for start in range(0, len(sentences), 50):
            batch = sentences[start : start + 50]
            reference, other = exact(batch), approximate(batch)
            a.append(reference.layers[:, reference.mask].reshape(-1, reference.layers.shape[-1]))
            b.append(other.layers[:, reference.mask].reshape(-1, other.layers.shape[-1]))
        x, y = torch.cat(a), torch.cat(b)
        keep = x.norm(dim=1) > 0
        cosine = torch.nn.functional.cosine_similarity(x[keep], y[keep], dim=1)
        print(f"{precision}: max |diff| {(x - y).abs().max():.3g}, mean cosine {cosine.mean():.6f}, min cosine {cosine.min():.5f}")


if __name__ == "__main__":
    main()
