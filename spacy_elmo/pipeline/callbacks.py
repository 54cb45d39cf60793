"""Callbacks for spaCy's training loop."""
import json
import resource
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from spacy.language import Language
from spacy.util import registry


@registry.callbacks("spacy-elmo.epoch_times.v1")
def epoch_times(path: str) -> Callable[[Language, Dict[str, Any]], None]:
    """A `[training.before_update]` callback: whenever an epoch starts, append the previous
    epoch's wall seconds, its steps and the process's peak RSS so far to `path` (JSON lines).
    An epoch's seconds count everything the loop did in it: updates, evaluations, saving."""
    output = Path(path)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("", encoding="utf-8")
    current: Dict[str, Optional[float]] = {"epoch": None, "start": None, "first_step": None}

    def before_update(nlp: Language, info: Dict[str, Any]) -> None:
        now = time.perf_counter()
        if current["epoch"] is not None and info["epoch"] != current["epoch"]:
            record = {
                "epoch": current["epoch"],
                "seconds": now - current["start"],
                "steps": info["step"] - current["first_step"],
                "peak_rss_mb": peak_rss_mb(),
            }
            with output.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
        if info["epoch"] != current["epoch"]:
            current.update(epoch=info["epoch"], start=now, first_step=info["step"])

    return before_update


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
