"""Why dev perplexity swings with the epoch, measured two ways. Run by hand.

    python benchmarks/epoch_phase.py profile RUN_DIR [RUN_DIR ...] [--from-step 1000]
    python benchmarks/epoch_phase.py continue CHECKPOINT OUT_DIR [--every 25] [--threads 1]

`profile` places each dev evaluation of a pretraining run (RUN_DIR/metrics.jsonl) in its
epoch. The epochs' exact lengths come from replaying the run's batching: its config (read
from RUN_DIR/checkpoints/last.pt) over its corpus. A cubic in log step, fitted to log dev
perplexity from `--from-step` on, stands for the trend. The command prints each
evaluation's residual from that trend against the fraction of its epoch done, and the mean
residual in each quarter of an epoch.

`continue` trains on from a checkpoint through the end of the next whole epoch, twice,
evaluating every `--every` steps. One arm draws the batches as training does: each epoch
reshuffles them, so every batch comes once. The other arm draws each epoch's batches
with replacement: the same batches, count and schedule, but some come twice and some not
at all. The patch is on `bucketed_batches`, so a checkpoint taken just before an epoch's
end also redraws that epoch's last batches. Both arms start from the checkpoint's random
state, so their dropout masks start alike. The command prints both arms' dev perplexity
by step.

The reason to compare them: under reshuffling, each epoch's gradient noise (each batch's
gradient minus the whole corpus's) sums to zero. Its pull on the weights therefore
shrinks towards an epoch's end and grows again in the next one. Draws with replacement
have no such sum.
"""

import argparse
import multiprocessing
import shutil
from pathlib import Path
from typing import Dict, List

import numpy
import torch

from spacy_elmo.analysis.plots import read_metrics
from spacy_elmo.training import data
from spacy_elmo.training.checkpoint import load_checkpoint
from spacy_elmo.training.config import PretrainConfig, config_from_dict
from spacy_elmo.training.outputs import METRICS_FILE
from spacy_elmo.training.trainer import pretrain

ARMS = ("reshuffled", "with_replacement")


def epoch_ends(config: PretrainConfig, last_step: int) -> List[int]:
    """The steps that take each epoch's last batch, from step 1 to `last_step`."""
    batching = config.batching
    shards = data.train_shards(config.paths.corpus)
    stream = data.BatchStream(shards, batching.tokens_per_batch, batching.max_sentence_tokens, batching.bucket_batches, config.training.seed)
    ends: List[int] = []
    for step in range(1, last_step + 1):
        epoch = stream.upcoming_epoch()
        next(stream)
        if stream.upcoming_epoch() != epoch:
            ends.append(step)
    return ends


def epoch_fraction(step: int, ends: List[int]) -> float:
    """How much of its epoch a model trained for `step` steps has seen: in (0, 1]."""
    start = max([end for end in ends if end < step], default=0)
    end = min([end for end in ends if end >= step], default=None)
    if end is None:  # the unfinished last epoch: as long as the one before
        end = start + (start - max([e for e in ends if e < start], default=0))
    return (step - start) / (end - start)


def profile(run_dirs: List[Path], from_step: int) -> None:
    for run_dir in run_dirs:
        config = config_from_dict(load_checkpoint(run_dir / "checkpoints" / "last.pt")["config"])
        metrics = read_metrics(run_dir / METRICS_FILE)
        kept = metrics.dev_steps >= from_step
        steps, log_ppl = metrics.dev_steps[kept], numpy.log(metrics.dev_perplexity[kept])
        ends = epoch_ends(config, int(steps.max()))
        if not ends:
            raise SystemExit(f"{run_dir}: no epoch ended by its last evaluation, so there is no phase to place")
        residual = log_ppl - numpy.polyval(numpy.polyfit(numpy.log(steps), log_ppl, 3), numpy.log(steps))
        fraction = numpy.array([epoch_fraction(int(s), ends) for s in steps])
        print(f"\n{run_dir}: epochs end at steps {ends}")
        print("| step | fraction of its epoch | dev perplexity | residual from the trend |")
        print("|---|---|---|---|")
        for index in numpy.argsort(fraction, kind="stable"):
            print(f"| {int(steps[index])} | {fraction[index]:.3f} | {numpy.exp(log_ppl[index]):.1f} | {100 * residual[index]:+.1f}% |")
        quarters = numpy.minimum((fraction * 4 - 1e-9).astype(int), 3)
        means = [f"{100 * residual[quarters == q].mean():+.2f}% ({int((quarters == q).sum())})" for q in range(4)]
        print("mean residual by quarter of the epoch (evaluations):", " / ".join(means))


def with_replacement(batch_maker):
    """`bucketed_batches`, then as many batches drawn with replacement from its result."""

    def draw(sentences, tokens_per_batch, bucket_batches, generator):
        batches = batch_maker(sentences, tokens_per_batch, bucket_batches, generator)
        return [batches[i] for i in torch.randint(len(batches), (len(batches),), generator=generator).tolist()]

    return draw


def continue_arm(arm: str, checkpoint_path: Path, raw: Dict, out_dir: Path) -> None:
    """Resume a copy of the checkpoint in OUT_DIR/ARM with the config `raw`."""
    run_dir = out_dir / arm
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(checkpoint_path, run_dir / "checkpoints" / "last.pt")
    if arm == "with_replacement":
        data.bucketed_batches = with_replacement(data.bucketed_batches)
    pretrain(config_from_dict(raw), run_dir, resume=True, progress_bar=False)


def continue_both(checkpoint_path: Path, out_dir: Path, every: int, threads: int) -> None:
    checkpoint = load_checkpoint(checkpoint_path)
    start, epoch_now = checkpoint["progress"]["step"], checkpoint["progress"]["position"][0]
    raw = checkpoint["config"]
    raw["training"].update(eval_every=every, checkpoint_every=10**9, max_epochs=epoch_now + 2, num_threads=threads)
    config = config_from_dict(raw)
    del checkpoint  # its weights: the arms read their own copies
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=continue_arm, args=(arm, checkpoint_path, raw, out_dir)) for arm in ARMS]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        if process.exitcode:
            raise SystemExit(f"an arm failed (exit code {process.exitcode})")
    if not all((out_dir / arm / METRICS_FILE).is_file() for arm in ARMS):
        raise SystemExit(f"{checkpoint_path}: the arms took no step (is the checkpoint's step budget spent?)")
    runs = {}
    for arm in ARMS:
        metrics = read_metrics(out_dir / arm / METRICS_FILE)
        runs[arm] = {int(step): ppl for step, ppl in zip(metrics.dev_steps, metrics.dev_perplexity) if step > start}
    ends = epoch_ends(config, max(runs[ARMS[0]]))
    print(f"from step {start}; epochs end at steps {[e for e in ends if e >= start]}")
    print("| step | fraction of its epoch | reshuffled | with replacement | ratio |")
    print("|---|---|---|---|---|")
    for step in sorted(runs[ARMS[0]]):
        a, b = runs[ARMS[0]][step], runs[ARMS[1]].get(step, float("nan"))
        print(f"| {step} | {epoch_fraction(step, ends):.3f} | {a:.1f} | {b:.1f} | {b / a:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    profile_parser = commands.add_parser("profile")
    profile_parser.add_argument("run_dirs", nargs="+", type=Path)
    profile_parser.add_argument("--from-step", type=int, default=1000)
    continue_parser = commands.add_parser("continue")
    continue_parser.add_argument("checkpoint", type=Path)
    continue_parser.add_argument("out_dir", type=Path)
    continue_parser.add_argument("--every", type=int, default=25)
    continue_parser.add_argument("--threads", type=int, default=1, help="Torch threads per arm (the arms run side by side)")
    args = parser.parse_args()
    if args.command == "profile":
        profile(args.run_dirs, args.from_step)
    else:
        continue_both(args.checkpoint, args.out_dir, args.every, args.threads)


if __name__ == "__main__":
    main()
