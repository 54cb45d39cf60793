"""Seconds per training epoch of the downstream twins, with and without the layer cache.

    python benchmarks/downstream_epochs.py --bilm training/model-best \
        --train corpus/ud/en_ewt-ud-train.spacy --dev corpus/ud/en_ewt-ud-dev.spacy --max-steps 2100

Trains, one after the other in fresh processes and with the same seed and budget:
configs/ud-base.cfg, configs/ud-elmo.cfg with its default layer cache, and
configs/ud-elmo.cfg with `layer_cache = "never"` (the biLM runs on every batch). Prints each
run's seconds per epoch (updates and evaluations), the mean of the epochs after the first,
its ratio to the baseline's, and the run's peak RSS. Run it on a quiet machine.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from downstream import later_epoch_seconds  # noqa: E402  (the twin runs' own summary)

RUNS = [
    ("base", REPO / "configs" / "ud-base.cfg", []),
    ("elmo, cached", REPO / "configs" / "ud-elmo.cfg", []),
    ("elmo, no cache", REPO / "configs" / "ud-elmo.cfg", ["--set", 'components.elmo.layer_cache="never"']),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bilm", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--dev", required=True)
    parser.add_argument("--max-steps", type=int, default=2100, help="Steps per run (UD EWT: epoch 2 ends at about step 2,010)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="Folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    output = Path(args.output or tempfile.mkdtemp(prefix="downstream-epochs-"))
    results = {}
    for name, config, extra in RUNS:
        run_dir = output / name.replace(", ", "-").replace(" ", "-")
        command = [
            sys.executable,
            str(REPO / "scripts" / "downstream.py"),
            "run",
            str(config),
            str(run_dir),
            "--seed",
            str(args.seed),
            "--max-steps",
            str(args.max_steps),
            "--train",
            args.train,
            "--dev",
            args.dev,
            *extra,
        ]
        if "elmo" in name:
            command += ["--bilm", args.bilm]
        print(f"training {name} ...", flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        results[name] = json.loads((run_dir / "run.json").read_text())
    later = {name: later_epoch_seconds([record]) for name, record in results.items()}
    if any(value is None for value in later.values()):
        raise SystemExit(f"{args.max_steps} steps end before a second epoch does: raise --max-steps")
    print(f"\n{args.max_steps} steps, seed {args.seed}; seconds per epoch (updates and evaluations)")
    print(f"{'run':16} {'epoch 0':>8} {'later (mean)':>13} {'x base':>7} {'total s':>8} {'peak RSS MiB':>13}  epochs")
    for name, record in results.items():
        epochs = record["epochs"]
        print(
            f"{name:16} {epochs[0]['seconds']:8.1f} {later[name]:13.1f} {later[name] / later['base']:7.2f} "
            f"{record['train_seconds']:8.0f} {record['peak_rss_mb']:13.0f}  " + " ".join(f"{e['seconds']:.0f}" for e in epochs)
        )


if __name__ == "__main__":
    main()
