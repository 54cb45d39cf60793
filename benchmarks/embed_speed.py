"""Embedding throughput of the two standard ELMo configurations, with seeded random weights.

For about 2,000 English sentences (5-40 tokens, UD English EWT train in ../shared) prints
tokens/s and peak RSS at batch sizes 32 and 64 sentences, for exact fp32 (the plain
forward without cache, and the fast path), bf16 and int8, the time split between token
encoder and LSTMs, and each approximate mode's deviation from fp32. Every measurement
runs in a fresh process, so peak RSS is its own. Run by hand:

    python benchmarks/embed_speed.py [--threads 2] [--sentences 2000] [--configs small original]
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy
import torch

from spacy_elmo.nn import BiLM, BiLMConfig, batch_to_char_ids
from spacy_elmo.nn.embedder import Embedder

FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
CONFIGS = {
    "small": BiLMConfig(filters=FILTERS, n_highway=1, lstm_dim=1024, projection_dim=128),
    "original": BiLMConfig(filters=FILTERS, n_highway=2, lstm_dim=4096, projection_dim=512),
}
MODES = ("plain-fp32", "fp32", "bf16", "int8")
EWT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-train.conllu"


def load_sentences(n: int) -> List[List[str]]:
    """The first `n` sentences of 5 to 40 tokens from UD English EWT."""
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


def lstm_flops_per_token(config: BiLMConfig) -> float:
    """Multiply-adds x 2 of both LSTM stacks for one token."""
    h, p, n = config.lstm_dim, config.projection_dim, config.n_layers
    projection = h * p if h != p else 0
    return 2 * 2 * n * (4 * h * p + 4 * h * p + projection)


def run_one(config_name: str, mode: str, batch_size: int, n_sentences: int, threads: int) -> Dict:
    """One measurement (in its own process): tokens/s, encoder share, peak RSS, outputs sample."""
    torch.set_num_threads(threads)
    sentences = sorted(load_sentences(n_sentences), key=len)
    bilm = seeded_bilm(CONFIGS[config_name])
    batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]
    encoder_seconds = 0.0
    outputs = []
    if mode == "plain-fp32":
        model, embed = bilm, lambda batch: bilm(torch.from_numpy(batch_to_char_ids(batch)), [len(s) for s in batch])
    else:
        embedder = Embedder(bilm, cache_size=50_000, precision=mode)
        model, embed = embedder.bilm, embedder
    encoder_forward = model.token_encoder.forward

    def timed_encoder(char_ids):
        nonlocal encoder_seconds
        t0 = time.perf_counter()
        result = encoder_forward(char_ids)
        encoder_seconds += time.perf_counter() - t0
        return result

    model.token_encoder.forward = timed_encoder
    with torch.no_grad():
        start = time.perf_counter()
        for batch in batches:
            outputs.append(embed(batch).layers.float())
        elapsed = time.perf_counter() - start
    n_tokens = sum(len(s) for s in sentences)
    sample = [o[:, :4].numpy().tolist() for o in outputs[:3]]  # first 4 tokens of each row of the first 3 batches
    return {
        "tokens_per_s": n_tokens / elapsed,
        "encoder_share": encoder_seconds / elapsed,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "sample": sample,
        "tokens": n_tokens,
    }


def matmul_rate(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of a square matrix product: the machine's ceiling for the LSTMs."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def deviation(exact: List, approximate: List) -> str:
    """Max abs difference and mean cosine over non-zero token vectors of the sampled batches."""
    a = numpy.concatenate([numpy.asarray(x).reshape(-1, numpy.asarray(x).shape[-1]) for x in exact])
    b = numpy.concatenate([numpy.asarray(x).reshape(-1, numpy.asarray(x).shape[-1]) for x in approximate])
    rows = numpy.linalg.norm(a, axis=1) > 0
    a, b = a[rows], b[rows]
    cosine = (a * b).sum(1) / (numpy.linalg.norm(a, axis=1) * numpy.linalg.norm(b, axis=1))
    return f"max |diff| {numpy.abs(a - b).max():.2e}, mean cosine {cosine.mean():.6f} ({len(a)} sampled token vectors)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--one", nargs=3, metavar=("CONFIG", "MODE", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        config_name, mode, batch = args.one
        print(json.dumps(run_one(config_name, mode, int(batch), args.sentences, args.threads)))
        return
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.sentences} sentences of UD English EWT")
    print(f"matrix product 2048x2048: fp32 {matmul_rate(torch.float32):.0f} GFLOP/s, bf16 {matmul_rate(torch.bfloat16):.0f} GFLOP/s")
    for config_name in args.configs:
        flops = lstm_flops_per_token(CONFIGS[config_name])
        print(f"\n{config_name}: LSTMs {flops / 1e6:.1f} MFLOP per token")
        for batch in args.batch_sizes:
            results = {}
            for mode in args.modes:
                command = [sys.executable, __file__, "--one", config_name, mode, str(batch), "--sentences", str(args.sentences), "--threads", str(args.threads)]
                line = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
                results[mode] = json.loads(line)
                r = results[mode]
                rate = r["tokens_per_s"] * flops / 1e9 / max(1e-9, 1 - r["encoder_share"])
                note = ""
                if mode in ("bf16", "int8") and "fp32" in results:
                    note = "  " + deviation(results["fp32"]["sample"], r["sample"])
                print(
                    f"  batch {batch:3} {mode:10} {r['tokens_per_s']:8.0f} tokens/s  "
                    f"encoder {100 * r['encoder_share']:4.1f}%  LSTM {rate:5.1f} GFLOP/s  "
                    f"peak RSS {r['peak_rss_mib']:6.0f} MiB{note}"
                )
            if "plain-fp32" in results and "fp32" in results:
                print(f"  batch {batch:3} fast fp32 / plain fp32 = {results['fp32']['tokens_per_s'] / results['plain-fp32']['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
