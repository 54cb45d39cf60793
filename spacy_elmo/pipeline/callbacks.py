"""Callbacks for spaCy's training loop."""

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from spacy.language import Language
from spacy.util import registry

from .component import elmo_component


@registry.callbacks("spacy-elmo.epoch_times.v1")
def epoch_times(path: str) -> Callable[[Language, Dict[str, Any]], None]:
    """A `[training.before_update]` callback: whenever an epoch starts, append the previous
    epoch's wall seconds, its steps and the process's peak RSS so far to `path` (JSON lines,
    emptied at the first step). An epoch's seconds count everything the loop did in it:
    updates, evaluations, saving. The epoch the training stops in is not written."""
    output = Path(path)
    current: Dict[str, Any] = {"epoch": None, "start": None, "first_step": None}

    def before_update(nlp: Language, info: Dict[str, Any]) -> None:
        now = time.perf_counter()
        if current["epoch"] is None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text("", encoding="utf-8")
        elif info["epoch"] != current["epoch"]:
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


@registry.callbacks("spacy-elmo.precomputed_layers.v1")
def precomputed_layers(paths: List[str], component: str = "elmo") -> Callable[[Language], Language]:
    """An `[initialize.after_init]` callback: once `nlp.initialize()` (in `spacy train`)
    is done, the elmo component `component` reads the layers of the sentences that the
    `dump --all` files at `paths` hold from them for the rest of the process
    (`ElmoComponent.use_precomputed_layers`). `spacy.load` does not run it."""

    def after_init(nlp: Language) -> Language:
        elmo_component(nlp, component).use_precomputed_layers(paths)
        return nlp

    return after_init


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux
