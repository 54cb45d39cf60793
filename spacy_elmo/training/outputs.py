"""What a training writes into its output folder, besides checkpoints and models.

pretrain.cfg            the validated config this training runs
metrics.jsonl           one JSON object per log interval and per evaluation
checkpoints/            last.pt and best.pt (see `checkpoint`)
model-last/, model-best/  model directories the `elmo` component loads
"""

import json
import shutil
from pathlib import Path
from typing import Any, Dict, Union

from ..io.staging import WriteError, write_text_atomically
from .checkpoint import CHECKPOINTS_DIR, MODEL_DIRS, staging_leftovers

PRETRAIN_CONFIG_FILE = "pretrain.cfg"
METRICS_FILE = "metrics.jsonl"
OUTPUTS = (CHECKPOINTS_DIR, *MODEL_DIRS, METRICS_FILE, PRETRAIN_CONFIG_FILE)


def holds_training(output_dir: Path) -> bool:
    """Whether `output_dir` holds anything a training writes."""
    return any((output_dir / name).exists() for name in OUTPUTS)


def check_not_an_output(path: Path, output_dir: Path, setting: str) -> None:
    """A ValueError if `path` lies in what a training in `output_dir` writes (its
    model-best/, checkpoints/, ...): the run would replace what it reads."""
    place = path.resolve()
    for name in OUTPUTS:
        output = (output_dir / name).resolve()
        if place == output or output in place.parents:
            raise ValueError(f"{setting} ({path}) lies in {output_dir / name}, which this training writes: copy the model elsewhere first")


def clear_training(output_dir: Union[str, Path]) -> None:
    """Remove what a training wrote into `output_dir` (checkpoints, models, metrics),
    including folders a crash left staged or half-swapped; anything else there stays."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return
    for path in [*(output_dir / name for name in OUTPUTS), *staging_leftovers(output_dir)]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def append_metrics(output_dir: Path, record: Dict[str, Any]) -> None:
    """Add one line to metrics.jsonl; a failed write is a `WriteError`."""
    path = output_dir / METRICS_FILE
    try:
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
    except OSError as err:
        raise WriteError(path, err) from err


def truncate_metrics(output_dir: Path, step: int) -> None:
    """Drop the metrics.jsonl records a killed run wrote after its last checkpoint (`step`)."""
    path = output_dir / METRICS_FILE
    if path.is_file():
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut by the kill
        write_text_atomically(path, "".join(line + "\n" for line in kept))
