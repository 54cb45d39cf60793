"""A pretraining sweep: named trials, each a base config plus overrides, trained at the same
step budget on the same corpus, a few at once, then one table of what each reached.
Run by hand after `spacy project run corpus`:

    python benchmarks/pretrain_sweep.py OUT_DIR --trial NAME [KEY=VALUE ...] [--trial ...]
        [--config configs/pretrain-demo.cfg] [--corpus corpus] [--steps 600 | --seconds 900]
        [--jobs 2] [--threads 1] [--seed 0]

    python benchmarks/pretrain_sweep.py sweep --steps 600 \
        --trial base --trial lr4 optimizer.learning_rate=0.004

Every trial runs `python -m spacy_elmo pretrain` with `training.max_steps=STEPS` (and no
time limit), or with `training.max_seconds=SECONDS` (and no step limit), a linear decay
spanning that budget (`schedule.horizon`), its own seed and thread count, into
OUT_DIR/NAME (a trial that finished already is read back, an interrupted one resumes). A
step budget makes trials comparable however busy the machine is; a wall-clock budget
compares what each trial reaches in the same time, fair only among trials that run side by
side on a machine nothing else uses. `tokens/s` is measured while the other trials ran
too, so it is comparable only within one sweep. The table (also OUT_DIR/sweep.md and
sweep.json) gives the steps, training tokens, wall time, tokens/s and the dev perplexity
of each evaluation. Dev perplexities are comparable only between trials with the same
vocabulary (the same corpus).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]


def parse_trials(argv: Sequence[str]) -> Tuple[List[str], Dict[str, List[str]]]:
    """Split `--trial NAME KEY=VALUE ...` groups from the other arguments."""
    rest: List[str] = []
    trials: Dict[str, List[str]] = {}
    current = None
    for arg in argv:
        if arg == "--trial":
            current = ""
        elif current == "":
            if arg in trials or arg.startswith("-"):
                raise SystemExit(f"--trial needs a new name, got {arg!r}")
            current = arg
            trials[current] = []
        elif current and "=" in arg and not arg.startswith("--"):
            trials[current].append(arg)
        else:
            current = None
            rest.append(arg)
    return rest, trials


def command(name: str, overrides: List[str], args: argparse.Namespace) -> List[str]:
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(args.config), str(args.out_dir / name), "--auto-resume", "--no-progress"]
    settings = {
        "paths.corpus": str(args.corpus),
        "training.max_steps": "0" if args.seconds else str(args.steps),
        "training.max_seconds": str(args.seconds),
        "schedule.horizon": "seconds" if args.seconds else "steps",
        "training.seed": str(args.seed),
        "training.num_threads": str(args.threads),
    }
    settings.update(override.split("=", 1) for override in overrides)
    for key, value in settings.items():
        cmd += [f"--{key}", value]
    return cmd


def finished(trial_dir: Path, args: argparse.Namespace) -> bool:
    train = [r for r in read_metrics(trial_dir) if "tokens" in r]
    if not train or not (trial_dir / "model-last").is_dir():
        return False
    if args.seconds:
        return train[-1]["elapsed_seconds"] >= args.seconds - 60  # the last log line comes a little before the end
    return train[-1]["step"] >= args.steps


def read_metrics(trial_dir: Path) -> List[dict]:
    path = trial_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summarize(name: str, overrides: List[str], trial_dir: Path) -> dict:
    records = read_metrics(trial_dir)
    train = [r for r in records if "tokens" in r]
    dev = [(r["step"], r["dev_mean"]) for r in records if "dev_mean" in r]
    last = train[-1] if train else {}
    seconds = last.get("elapsed_seconds", 0.0)
    return {
        "trial": name,
        "overrides": " ".join(overrides) or "(base)",
        "steps": last.get("step", 0),
        "tokens": last.get("tokens", 0),
        "seconds": seconds,
        "tokens_per_second": last.get("tokens", 0) / seconds if seconds else 0.0,
        "dev": dev,
    }


def table(rows: List[dict]) -> str:
    lines = [
        "| trial | overrides | steps | tokens | wall s | tokens/s | dev ppl (step: ppl) | final dev ppl |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        curve = ", ".join(f"{step}: {ppl:.1f}" for step, ppl in row["dev"])
        final = f"{row['dev'][-1][1]:.1f}" if row["dev"] else "n/a"
        lines.append(
            f"| {row['trial']} | `{row['overrides']}` | {row['steps']} | {row['tokens']:,} | {row['seconds']:.0f} "
            f"| {row['tokens_per_second']:,.0f} | {curve} | {final} |"
        )
    return "\n".join(lines)


def main() -> None:
    rest, trials = parse_trials(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "pretrain-demo.cfg")
    parser.add_argument("--corpus", type=Path, default=Path("corpus"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seconds", type=int, default=0, help="A wall-clock budget per trial instead of --steps")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(rest)
    if not trials:
        parser.error("name at least one --trial")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pending = [name for name in trials if not finished(args.out_dir / name, args)]
    running: Dict[str, Tuple[subprocess.Popen, IO[str]]] = {}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            (args.out_dir / name).mkdir(parents=True, exist_ok=True)
            log = (args.out_dir / name / "sweep.log").open("a", encoding="utf-8")
            print(f"start {name}: {' '.join(trials[name]) or '(base)'}", flush=True)
            running[name] = (subprocess.Popen(command(name, trials[name], args), stdout=log, stderr=subprocess.STDOUT, env=env), log)
        for name, (process, log) in list(running.items()):
            if process.poll() is not None:
                log.close()
                print(f"done {name} (exit {process.returncode})", flush=True)
                del running[name]
        time.sleep(2)
    rows = [summarize(name, overrides, args.out_dir / name) for name, overrides in trials.items()]
    budget = f"{args.seconds} s" if args.seconds else f"{args.steps} steps"
    setup = f"Base config {args.config.name}, corpus {args.corpus}, {budget}, seed {args.seed}"
    text = f"{setup}, {args.jobs} trials at once with {args.threads} thread(s) each.\n\n{table(rows)}\n"
    (args.out_dir / "sweep.md").write_text(text, encoding="utf-8")
    (args.out_dir / "sweep.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
