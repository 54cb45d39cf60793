"""Training throughput of pretraining configs: tokens/s of forward + backward + optimizer
step on real batches of a prepared corpus, in fp32 and in bf16 autocast (where the device
has native bf16), and the share of the machine's matrix-product rate that this is. Every
(config, precision) runs in a fresh process (its own peak RSS), one after the other.
Run by hand after `spacy project run corpus`:

    python benchmarks/train_speed.py [--corpus corpus] [--steps 20] [--threads 2]
        [--configs configs/pretrain-demo.cfg ...] [--precisions fp32 bf16] [--device cpu]
        [--tokens-per-batch N] [--profile]

"share of GEMM" = model FLOPs per token (counted by torch's FlopCounterMode over a training
step: forward and backward matrix products and convolutions) x tokens/s / the GFLOP/s of a
1024^3 matrix product in the same precision (best of five), measured in the same process. "faults"
and "sys ms" are the minor page faults and the kernel's time per measured step
(`getrusage`): a step that maps its large buffers afresh pays for them here. `--profile`
also prints where a step's time goes (data, forward, backward, optimizer) and the
operators that take the most of it. "loops" says which LSTM time loops trained: the
compiled ones (nn/fused_loops.py) or, where they cannot be built or
SPACY_ELMO_FUSED_LOOPS=0, the Python ones.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import torch
from torch.utils.flop_counter import FlopCounterMode

from spacy_elmo.heap import keep_freed_memory
from spacy_elmo.nn.fused_loops import fused_loops
from spacy_elmo.nn.precision import bf16_is_fast
from spacy_elmo.training.config import load_config
from spacy_elmo.training.data import BatchStream, Vocabulary, to_tensors, train_shards
from spacy_elmo.training.optim import make_optimizer
from spacy_elmo.training.trainer import build_objective

REPO = Path(__file__).resolve().parents[1]
PHASES = ("data", "forward", "backward", "optimizer")


def gemm_gflops(precision: str, device: str, size: int = 1024, repeats: int = 10, rounds: int = 5) -> float:
    """GFLOP/s of a (size, size) @ (size, size) product in `precision`: the best of `rounds`."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(rounds):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        synchronize(device)
        best = max(best, 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9)
    return best


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(config_path: str, corpus: str, steps: int, threads: int, device: str, precision: str, tokens_per_batch: int, profile: bool) -> dict:
    torch.set_num_threads(threads)
    if device == "cpu":
        keep_freed_memory()  # as the trainer does
    overrides = {"paths.corpus": corpus}
    if tokens_per_batch:
        overrides["batching.tokens_per_batch"] = tokens_per_batch
    config = load_config(config_path, overrides)
    vocab = Vocabulary.from_file(Path(corpus) / "vocab.txt")
    torch.manual_seed(0)
    objective = build_objective(config, vocab).to(device)
    optimizer = make_optimizer(config.optimizer, objective.parameters())
    batching = config.batching
    stream = BatchStream(train_shards(corpus), batching.tokens_per_batch, batching.max_sentence_tokens, batching.bucket_batches, 0)
    sentences = [next(stream) for _ in range(steps + 2)]
    autocast = precision == "bf16"
    seconds: Dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def timed(phase: str, work: Callable):
        synchronize(device)
        start = time.perf_counter()
        result = work()
        synchronize(device)
        seconds[phase] += time.perf_counter() - start
        return result

    def step(batch_sentences) -> int:
        batch = timed("data", lambda: [t.to(device) for t in to_tensors(batch_sentences, vocab, objective.bilm)])
        optimizer.zero_grad(set_to_none=True)

        def forward():
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
                return objective(*batch).loss

        loss = timed("forward", forward)
        timed("backward", loss.backward)

        def update():
            torch.nn.utils.clip_grad_norm_(objective.parameters(), config.training.grad_clip or float("inf"))
            optimizer.step()

        timed("optimizer", update)
        return sum(len(s) for s in batch_sentences)

    counter = FlopCounterMode(display=False)
    with counter:  # also the first warm-up step
        flop_tokens = step(sentences[0])
    flops_per_token = counter.get_total_flops() / flop_tokens
    step(sentences[1])
    seconds = dict.fromkeys(PHASES, 0.0)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    start, tokens = time.perf_counter(), 0
    if profiler:
        profiler.start()
    for batch_sentences in sentences[2:]:
        tokens += step(batch_sentences)
    if profiler:
        profiler.stop()
    total = time.perf_counter() - start
    usage_after = resource.getrusage(resource.RUSAGE_SELF)
    tokens_per_second = tokens / total
    gflops = gemm_gflops(precision, device)
    result = {
        "config": config_path,
        "precision": precision,
        "loops": "fused" if device == "cpu" and fused_loops() is not None else "Python",
        "parameters": sum(p.numel() for p in objective.parameters()),
        "tokens_per_batch": batching.tokens_per_batch,
        "tokens_per_second": tokens_per_second,
        "ms_per_step": 1000 * total / steps,
        "model_gflop_per_token": flops_per_token / 1e9,
        "gemm_gflops": gflops,
        "share_of_gemm": flops_per_token * tokens_per_second / (gflops * 1e9),
        "phase_share": {phase: value / total for phase, value in seconds.items()},
        "minor_faults_per_step": (usage_after.ru_minflt - usage_before.ru_minflt) / steps,
        "system_ms_per_step": 1000 * (usage_after.ru_stime - usage_before.ru_stime) / steps,
        "peak_rss_gb": usage_after.ru_maxrss / 2**20,
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0,
    }
    if profiler:
        result["top_operators"] = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(REPO / "corpus"))
    parser.add_argument("--configs", nargs="+", default=[str(REPO / "configs" / "pretrain-demo.cfg")])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens-per-batch", type=int, default=0, help="Override every config's batch (0: as configured)")
    parser.add_argument("--profile", action="store_true", help="Also print each run's time per phase and top operators")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = measure(args.one, args.corpus, args.steps, args.threads, args.device, args.precision, args.tokens_per_batch, args.profile)
        print(json.dumps(result))
        return
    precisions = [p for p in args.precisions if p == "fp32" or bf16_is_fast(torch.device(args.device))]
    if len(precisions) < len(args.precisions):
        print(f"bf16 skipped: {args.device} has no native bfloat16 (AVX512-BF16 or AMX on a CPU)")
    print(
        f"{'config':26} {'prec':5} {'loops':6} {'params':>11} {'batch':>6} {'tokens/s':>9} {'ms/step':>8} {'GFLOP/tok':>9} "
        f"{'GEMM GF/s':>9} {'share':>6} {'faults':>7} {'sys ms':>6} {'RSS':>6}"
    )
    profiles = []
    for config in args.configs:
        for precision in precisions:
            command = [
                sys.executable,
                __file__,
                "--one",
                config,
                "--precision",
                precision,
                "--corpus",
                args.corpus,
                "--steps",
                str(args.steps),
                "--threads",
                str(args.threads),
                "--device",
                args.device,
                "--tokens-per-batch",
                str(args.tokens_per_batch),
            ]
            if args.profile:
                command.append("--profile")
            result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
            print(
                f"{Path(result['config']).name:26} {precision:5} {result['loops']:6} {result['parameters']:11,} {result['tokens_per_batch']:6} "
                f"{result['tokens_per_second']:9,.0f} {result['ms_per_step']:8.0f} {result['model_gflop_per_token']:9.4f} "
                f"{result['gemm_gflops']:9.0f} {result['share_of_gemm']:6.1%} {result['minor_faults_per_step']:7,.0f} "
                f"{result['system_ms_per_step']:6.1f} {result['peak_rss_gb']:5.2f}G",
                flush=True,
            )
            profiles.append(result)
    if args.profile:
        for result in profiles:
            phases = ", ".join(f"{phase} {share:.0%}" for phase, share in result["phase_share"].items())
            print(f"\n{Path(result['config']).name} {result['precision']}: {phases}\n{result['top_operators']}")


if __name__ == "__main__":
    main()
