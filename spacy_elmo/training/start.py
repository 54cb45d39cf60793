"""How a training starts in an output folder: afresh, resumed, or replacing what is there.

`find_training` reads the folder (the only I/O here); `plan_start` is a pure function of
the config, the mode, what was found, the corpus and the number of processes, and says
which checkpoint to resume from, whether to clear the old outputs first, and the config
the run trains with.
"""

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

from ..io import ModelFileError
from .checkpoint import BEST_CHECKPOINT, CHECKPOINTS_DIR, LAST_CHECKPOINT, load_checkpoint
from .config import PretrainConfig, config_from_dict, resumable_keys
from .outputs import holds_training


class StartMode(enum.Enum):
    NEW = "new"
    """Start afresh; an output folder that holds a training is an error."""
    RESUME = "resume"
    """Continue checkpoints/last.pt; an error if it is missing or does not fit."""
    OVERWRITE = "overwrite"
    """Remove the training there and start afresh."""
    AUTO = "auto"
    """Resume where the checkpoint fits this config and corpus, else replace the training
    there (the project's `pretrain` command). An unreadable last.pt is still an error."""

    @classmethod
    def from_flags(cls, resume: bool, overwrite: bool, auto_resume: bool) -> "StartMode":
        if resume + overwrite + auto_resume > 1:
            raise ValueError("resume, overwrite and auto_resume exclude each other")
        return cls.RESUME if resume else cls.OVERWRITE if overwrite else cls.AUTO if auto_resume else cls.NEW


@dataclass(frozen=True)
class FoundTraining:
    """What an output folder holds."""

    output_dir: Path
    has_outputs: bool
    checkpoint: Optional[Dict[str, Any]] = None
    """checkpoints/last.pt (best.pt where a run stopped before its first last.pt), read when
    the mode may resume it and it could be read."""
    problem: Optional[ModelFileError] = None
    """Why last.pt could not be read, when it was to be."""


@dataclass(frozen=True)
class StartPlan:
    config: PretrainConfig
    """What the run trains with: the given config (resumed: checked against the checkpoint's)."""
    checkpoint: Optional[Dict[str, Any]] = None
    """The state to resume from; None: start afresh."""
    clear: bool = False
    """Remove the previous training's outputs before starting."""
    discarded: str = ""
    """Why checkpoints/last.pt is not resumed, when `StartMode.AUTO` replaces it."""


def find_training(output_dir: Path, mode: StartMode) -> FoundTraining:
    """Look into `output_dir`, reading its checkpoint only when `mode` may resume it:
    checkpoints/last.pt, or best.pt where there is no last.pt (a run stopped between its
    first evaluation and its first checkpoint: best.pt holds the whole state of its step).
    A damaged or foreign last.pt's problem points to best.pt."""
    has_outputs = holds_training(output_dir)
    last, best = (output_dir / CHECKPOINTS_DIR / name for name in (LAST_CHECKPOINT, BEST_CHECKPOINT))
    checkpoint = last if last.is_file() or not best.is_file() else best
    if mode not in (StartMode.RESUME, StartMode.AUTO) or (mode is StartMode.AUTO and not checkpoint.is_file()):
        return FoundTraining(output_dir, has_outputs)
    try:
        return FoundTraining(output_dir, has_outputs, load_checkpoint(checkpoint))
    except ModelFileError as err:
        if not checkpoint.is_file():
            return FoundTraining(output_dir, has_outputs, problem=err)
        if checkpoint == best:
            fallback = f"there is no {last} either: --overwrite starts afresh"
        elif best.is_file():
            fallback = f"{best} holds the state at the best dev perplexity: copy it over {last} to resume from there"
        else:
            fallback = f"there is no {best} to fall back on: --overwrite starts afresh"
        return FoundTraining(output_dir, has_outputs, problem=ModelFileError(checkpoint, f"{err.problem}; {fallback}"))


def plan_start(config: PretrainConfig, mode: StartMode, found: FoundTraining, corpus: Dict[str, Any], world_size: int) -> StartPlan:
    """What to load and what to clear; ValueError (ModelFileError for an unreadable
    checkpoint) when `mode` cannot start here."""
    if found.problem is not None:
        raise found.problem
    if mode is StartMode.OVERWRITE:
        return StartPlan(config, clear=True)
    if mode is StartMode.RESUME:
        assert found.checkpoint is not None
        return StartPlan(resumed_config(config, found.checkpoint, corpus, world_size), found.checkpoint)
    if mode is StartMode.AUTO:
        if found.checkpoint is None:
            return StartPlan(config, clear=True, discarded="it holds no checkpoint to resume" if found.has_outputs else "")
        try:
            return StartPlan(resumed_config(config, found.checkpoint, corpus, world_size), found.checkpoint)
        except ValueError as err:
            return StartPlan(config, clear=True, discarded=str(err))
    if found.has_outputs:
        raise ValueError(f"{found.output_dir} already holds a training; pass --resume to continue it, --overwrite to replace it, or choose another directory")
    return StartPlan(config)


def resumed_config(config: PretrainConfig, checkpoint: Dict[str, Any], corpus: Dict[str, Any], world_size: int) -> PretrainConfig:
    """`config` if the checkpoint was written by as many processes on the same corpus, with
    a config that differs at most in `resumable_keys()` (under a linear decay, not the budget
    its `schedule.budget_key` names). With `init_from`, the model shape is the checkpoint's
    (the init weights are not reloaded); `head.bias_init` is the checkpoint's (the head's
    state comes from it). ValueError naming the difference otherwise."""
    if len(checkpoint["rng"]) != world_size:
        raise ValueError(f"cannot resume: the checkpoint was written by {len(checkpoint['rng'])} processes, this run has {world_size}")
    for key, value in checkpoint["corpus"].items():
        if corpus.get(key) != value:
            changed = "the paths.init_from model" if key == "init_from" else "the corpus"
            raise ValueError(f"cannot resume: {changed} changed since the checkpoint ({key} differs)")
    saved = config_from_dict(checkpoint["config"], "the checkpoint's config").to_dict()  # keys added since: defaults
    current = config.to_dict()
    if config.paths.init_from is not None:
        current["model"] = saved["model"]
    current["head"]["bias_init"] = saved["head"]["bias_init"]
    changeable = set(resumable_keys()) - ({config.schedule.budget_key} if config.schedule.decay == "linear" else set())
    for key in ("init_from", "init_options"):  # their files are compared above; the spelling of a path may change
        if (saved["paths"].get(key) is None) != (current["paths"].get(key) is None):
            raise ValueError(f"cannot resume: [paths] {key} was {saved['paths'].get(key)!r}, is now {current['paths'].get(key)!r}")
    for section in saved.keys() - {"paths"}:
        for key in sorted(set(saved[section]) | set(current[section])):
            if saved[section].get(key) != current[section].get(key) and not (section == "training" and key in changeable):
                raise ValueError(f"cannot resume: [{section}] {key} was {saved[section].get(key)!r}, is now {current[section].get(key)!r}")
    return config_from_dict(current, "the resumed config")
