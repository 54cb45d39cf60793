"""Training throughput of pretraining configs: tokens/s of forward + backward + optimizer
step, on real batches of a prepared corpus. Every config runs in a fresh process (its
own peak RSS). Run by hand after `spacy project run corpus`:

    python benchmarks/train_speed.py [--corpus corpus] [--steps 20] [--threads 2]
        [--configs configs/pretrain-demo.cfg configs/pretrain-gpu.cfg] [--device cpu]
        [--tokens-per-batch N]
"""
import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from spacy_elmo.training.config import load_config
from spacy_elmo.training.data import BatchStream, Vocabulary, to_tensors, train_shards
from spacy_elmo.training.optim import make_optimizer
from spacy_elmo.training.trainer import build_objective

REPO = Path(__file__).resolve().parents[1]


def measure(config_path: str, corpus: str, steps: int, threads: int, device: str, tokens_per_batch: int) -> dict:
    torch.set_num_threads(threads)
    overrides = {"paths.corpus": corpus}
    if tokens_per_batch:
        overrides["batching.tokens_per_batch"] = tokens_per_batch
    config = load_config(config_path, overrides)
    vocab = Vocabulary.from_file(Path(corpus) / "vocab.txt")
    torch.manual_seed(0)
    objective = build_objective(config, len(vocab)).to(device)
    optimizer = make_optimizer(config.optimizer, objective.parameters())
    batching = config.batching
    stream = BatchStream(train_shards(corpus), batching.tokens_per_batch, batching.max_sentence_tokens, batching.bucket_batches, 0)
    width = objective.bilm.config.max_characters_per_token
    batches = [to_tensors(next(stream), vocab, width) for _ in range(steps + 2)]
    autocast = config.training.mixed_precision and device.startswith("cuda")

    def step(batch) -> int:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
            loss = objective(*(t.to(device) for t in batch)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(objective.parameters(), config.training.grad_clip or float("inf"))
        optimizer.step()
        return int(batch.lengths.sum())

    for batch in batches[:2]:  # warm-up
        step(batch)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start, tokens = time.perf_counter(), 0
    for batch in batches[2:]:
        tokens += step(batch)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {
        "config": config_path,
        "parameters": sum(p.numel() for p in objective.parameters()),
        "tokens_per_batch": batching.tokens_per_batch,
        "tokens_per_second": tokens / seconds,
        "ms_per_step": 1000 * seconds / steps,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(REPO / "corpus"))
    parser.add_argument("--configs", nargs="+", default=[str(REPO / "configs" / "pretrain-demo.cfg"), str(REPO / "configs" / "pretrain-gpu.cfg")])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens-per-batch", type=int, default=0, help="Override every config's batch (0: as configured)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.corpus, args.steps, args.threads, args.device, args.tokens_per_batch)))
        return
    print(f"{'config':34} {'params':>12} {'batch':>6} {'tokens/s':>10} {'ms/step':>9} {'peak RSS':>9} {'peak GPU':>9}")
    for config in args.configs:
        command = [sys.executable, __file__, "--one", config, "--corpus", args.corpus, "--steps", str(args.steps), "--threads", str(args.threads), "--device", args.device, "--tokens-per-batch", str(args.tokens_per_batch)]
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(
            f"{Path(result['config']).name:34} {result['parameters']:12,} {result['tokens_per_batch']:6} "
            f"{result['tokens_per_second']:10,.0f} {result['ms_per_step']:9.0f} {result['peak_rss_gb']:8.2f}G {result['peak_gpu_gb']:8.2f}G"
        )


if __name__ == "__main__":
    main()
