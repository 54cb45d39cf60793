"""Training checkpoints and trained-model directories, both written atomically.

A checkpoint (`checkpoints/last.pt`, `checkpoints/best.pt`) holds everything an exact
resume needs: objective and optimizer state, progress (step, data position, elapsed
time, best dev perplexity), every process's RNG state and a word-level biLM's vocabulary. It holds only tensors and
plain values and is read with `torch.load(weights_only=True)`, which unpickles nothing
else. A model directory (`model-last/`, `model-best/`) is what the `elmo` component and
`evaluate` read: the biLM (`config.json`, `weights.npz`), `softmax.npz`, `vocab.txt` and
`training.json`.

Both are written to a staging path beside their place and renamed into it, so a write
that fails part-way (a full disk, a permission error) leaves the previous version intact
and is reported as a `WriteError` naming the path and the cause; the staging files of a
failed write are removed, those of a killed process by `remove_staging_leftovers`.
"""

import dataclasses
import hashlib
import json
import logging
import pickle
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Counter, Dict, List, Optional, Sequence, Tuple, Union

import torch

from ..io import ModelFileError, load_lm_head, load_model, save_lm_head, write_model_files
from ..io.digests import file_digest
from ..io.lm_head import HEAD_FILE
from ..io.model_dir import TRAINING_FILE, read_training_record
from ..io.staging import STAGING_MARK, put_back_retired, staged_directory, write_atomically
from ..nn.objective import BiLMObjective
from ..nn.softmax import FullSoftmax
from ..nn.special_tokens import UNK_ID
from .config import BatchingSettings
from .data import VOCAB_FILE, DataPosition, Vocabulary, read_sentences

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "spacy-elmo-checkpoint/1"
TORCH_FILE_START = b"PK\x03\x04"
"""torch.save writes a zip archive."""
CHECKPOINTS_DIR = "checkpoints"
LAST_CHECKPOINT, BEST_CHECKPOINT = "last.pt", "best.pt"
MODEL_BEST, MODEL_LAST = "model-best", "model-last"
MODEL_DIRS = (MODEL_BEST, MODEL_LAST)


@dataclass
class ThroughputWindow:
    """What happened since the last metrics line."""

    loss_sum: float = 0.0
    """Summed NLL (mean of the two directions), all processes."""
    predictions: int = 0
    """Predictions per direction."""
    tokens: int = 0
    seconds: float = 0.0
    """Wall time of the steps themselves."""
    skipped: int = 0
    """Steps skipped for a non-finite loss or gradient."""

    def add_step(self, loss_sum: float, predictions: int, tokens: int, seconds: float) -> None:
        self.loss_sum += loss_sum
        self.predictions += predictions
        self.tokens += tokens
        self.seconds += seconds


@dataclass
class Progress:
    step: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    """Where the next training batch comes from."""
    elapsed_seconds: float = 0.0
    """Training wall time summed over all runs of this training."""
    tokens: int = 0
    """Training tokens seen (all processes)."""
    best_dev_perplexity: Optional[float] = None
    best_step: int = 0
    evaluated_step: int = -1
    """The step of the last dev evaluation."""
    window: ThroughputWindow = field(default_factory=ThroughputWindow)
    skipped_steps: int = 0
    """Steps skipped for a non-finite loss or gradient, in all (not counted in `step`)."""
    bad_streak: int = 0
    """Of those, how many in a row up to now."""

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        data["position"] = list(self.position)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Progress":
        data = dict(data)
        window = data.pop("window")
        if isinstance(window, list):  # checkpoints of earlier versions: [loss_sum, predictions, tokens, seconds]
            loss_sum, predictions, tokens, seconds = window
            window = {
                "loss_sum": loss_sum,
                "predictions": int(predictions),
                "tokens": int(tokens),
                "seconds": seconds,
                "skipped": data.pop("window_skipped", 0),
            }
        return cls(**{**data, "position": DataPosition(*data["position"]), "window": ThroughputWindow(**window)})


def save_checkpoint(
    path: Path,
    objective: BiLMObjective,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    rng: List[List[torch.Tensor]],
    config: Dict[str, Any],
    corpus: Dict[str, Any],
) -> None:
    """Write atomically: a crash or a failed write leaves the previous checkpoint intact.
    `corpus` identifies the training data (see `corpus_fingerprint`)."""
    content = {
        "format": CHECKPOINT_FORMAT,
        "corpus": corpus,
        "objective": {name: t.detach().cpu() for name, t in objective.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "progress": progress.to_dict(),
        "rng": [[state.cpu() for state in states] for states in rng],
        "config": config,
        "words": list(objective.bilm.words) if objective.bilm.words is not None else None,
    }
    write_atomically(path, lambda out: _torch_save(content, out))


class _ErrorKeepingFile:
    """A binary file that keeps the first OSError of its writes: torch.save reports a
    failed write only as a RuntimeError of its zip writer."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.error: Optional[OSError] = None

    def write(self, data: bytes) -> int:
        try:
            return self.out.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.out.flush()


def _torch_save(content: Dict[str, Any], out: BinaryIO) -> None:
    """torch.save into `out`, raising the OSError of a failed write as such."""
    keeping = _ErrorKeepingFile(out)
    try:
        torch.save(content, keeping)  # type: ignore[arg-type]
    except RuntimeError as err:
        if keeping.error is None:
            raise
        raise keeping.error from err


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """A checkpoint's content; tensors and plain values only, nothing else is unpickled."""
    if not path.is_file():
        raise ModelFileError(path, "checkpoint not found")
    content = _read_torch_file(path)
    if not isinstance(content, dict) or content.get("format") != CHECKPOINT_FORMAT:
        raise ModelFileError(path, f"not a {CHECKPOINT_FORMAT} checkpoint (a torch file of another kind)")
    return content


def _read_torch_file(path: Path) -> Any:
    with path.open("rb") as source:
        start = source.read(len(TORCH_FILE_START))
    if start != TORCH_FILE_START:
        raise ModelFileError(path, "not a readable checkpoint: " + ("the file is empty" if not start else "not a file torch.save writes"))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ModelFileError(path, "not a readable checkpoint: it holds objects other than tensors and plain values, which are never unpickled") from err
    except Exception as err:  # torch raises many types for a damaged file
        raise ModelFileError(path, f"not a readable checkpoint: cut short or damaged ({_first_sentence(err)})") from err


def _first_sentence(err: Exception) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text.split(". ")[0]


def save_trained_model(objective: BiLMObjective, vocab: Vocabulary, model_dir: Path, info: Dict[str, Any]) -> None:
    """Write the model directory next to its final place, then swap it in; a failed write
    is a `WriteError` and leaves the previous one intact."""
    with staged_directory(model_dir) as staging:
        write_model_files(objective.bilm, staging)
        save_lm_head(objective.head.weight, objective.head.bias, staging)
        vocab.to_file(staging / VOCAB_FILE)
        (staging / TRAINING_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")


def remove_staging_leftovers(output_dir: Path) -> None:
    """Remove the staging files and folders a killed process left in a training's
    `output_dir`; a model directory caught between its two renames is put back."""
    for name in MODEL_DIRS:
        put_back_retired(output_dir / name)
    for staging in staging_leftovers(output_dir):
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        else:
            staging.unlink()


def staging_leftovers(output_dir: Path) -> List[Path]:
    """The staging files and folders in a training's `output_dir` (a killed process's)."""
    found = [path for name in MODEL_DIRS for path in output_dir.glob(name + STAGING_MARK + "*")]
    for name in (LAST_CHECKPOINT, BEST_CHECKPOINT):
        found += output_dir.glob(f"{CHECKPOINTS_DIR}/.{name}{STAGING_MARK}*")
    return found


def load_trained_model(model_dir: Union[str, Path]) -> Tuple[BiLMObjective, Vocabulary]:
    """The biLM with its softmax and vocabulary from a pretraining model directory."""
    model_dir = Path(model_dir)
    bilm = load_model(model_dir)
    weight, bias, vocab = load_softmax_and_vocab(model_dir, bilm.config.projection_dim)
    head = FullSoftmax(bilm.config.projection_dim, len(vocab))
    head.load_state_dict({"weight": weight, "bias": bias})
    return BiLMObjective(bilm, head).eval(), vocab


def load_softmax_and_vocab(model_dir: Path, dim: int) -> Tuple[torch.Tensor, torch.Tensor, Vocabulary]:
    """A pretraining model directory's softmax weight (vocab, dim), bias and vocabulary."""
    weight, bias = load_lm_head(model_dir)
    vocab = Vocabulary.from_file(model_dir / VOCAB_FILE)
    if weight.shape != (len(vocab), dim):
        raise ModelFileError(model_dir / HEAD_FILE, f"softmax is {tuple(weight.shape)}, expected ({len(vocab)}, {dim}) for vocab.txt and the biLM")
    return weight, bias, vocab


def carry_over_softmax(head: FullSoftmax, source: Union[str, Path], vocab: Vocabulary, shards: Sequence[Path]) -> None:
    """Copy into `head` the softmax rows of the words that `vocab` shares with the vocabulary
    of `source`, a pretraining model directory, and log what was carried over (nothing when
    `source` keeps no softmax, as a pipeline or public weights do: every row starts fresh).

    The words `vocab` adds were `<UNK>` to the source model, so they start from its `<UNK>`
    row, each with the share of `<UNK>`'s probability that its count in the training
    `shards` has among the tokens the source did not know (add-one smoothed); `<UNK>` keeps
    the rest. Where `vocab` holds every source word, the head starts out predicting exactly
    what the source predicted, the unknown words' mass split among the new ones."""
    source = Path(source)
    if not source.is_dir() or not (source / HEAD_FILE).is_file() or not (source / VOCAB_FILE).is_file():
        return
    weight, bias, old = load_softmax_and_vocab(source, head.weight.shape[1])
    pairs = [(new, old.index[token]) for new, token in enumerate(vocab.tokens) if token in old.index]
    new_ids = torch.tensor([new for new, _ in pairs], dtype=torch.long, device=head.weight.device)
    old_ids = torch.tensor([o for _, o in pairs], dtype=torch.long)
    added = [token for token in vocab.tokens if token not in old.index]
    logger.info("softmax rows of %d of %d words taken from %s", len(pairs), len(vocab), source)
    dropped = len(old) - len(pairs)
    if dropped:
        logger.warning(
            "the vocabulary lacks %d of the %d words of %s: their probability goes to no row (prepare the corpus with --vocab %s to keep them)",
            dropped,
            len(old),
            source,
            source / VOCAB_FILE,
        )
    with torch.no_grad():
        head.weight[new_ids] = weight[old_ids].to(head.weight.device)
        head.bias[new_ids] = bias[old_ids].to(head.bias.device)
    if added:
        log_shares = _unknown_log_shares(shards, old, added)
        ids = torch.tensor([vocab.index[token] for token in added] + [UNK_ID], dtype=torch.long, device=head.weight.device)
        with torch.no_grad():
            head.weight[ids] = weight[UNK_ID].to(head.weight.device)
            head.bias[ids] = (bias[UNK_ID] + log_shares).to(head.bias.device)
        logger.info("the other %d start from its <UNK> row, sharing its probability by their counts in the training text", len(added))


def _unknown_log_shares(shards: Sequence[Path], known: Vocabulary, added: Sequence[str]) -> torch.Tensor:
    """(len(added) + 1,) log shares of the training tokens unknown to `known`: each added
    word's, then the rest's (what stays `<UNK>`), add-one smoothed so that they sum to 1."""
    counts: Counter = Counter()
    for shard in shards:
        for sentence in read_sentences(shard, sys.maxsize):  # whole lines
            counts.update(token for token in sentence if token not in known.index)
    unknown = sum(counts.values())
    added_counts = [counts[token] for token in added]
    shares = torch.tensor([*added_counts, unknown - sum(added_counts)], dtype=torch.float64) + 1.0
    return torch.log(shares / shares.sum()).float()


def trained_max_sentence_tokens(model_dir: Union[str, Path]) -> int:
    """The sentence-piece length the model was trained and evaluated with (the config's
    default if `training.json` does not say)."""
    default = BatchingSettings().max_sentence_tokens
    value = (read_training_record(model_dir) or {}).get("max_sentence_tokens")
    return value if isinstance(value, int) and value > 0 else default


def corpus_fingerprint(vocab_path: Path, shards: List[Path], dev_path: Path) -> Dict[str, Any]:
    """What a resumed run must find again: the vocabulary, the shards' names and sizes, and
    the contents of the shards and of the dev sentences (None where there are none): a
    corpus prepared again with another seed can keep every size. Checkpoints written before
    the contents were recorded resume on the vocabulary, names and sizes."""
    return {
        "vocab_sha256": hashlib.sha256(vocab_path.read_bytes()).hexdigest(),
        "shards": [[shard.name, shard.stat().st_size] for shard in shards],
        "shard_digests": [file_digest(shard) for shard in shards],
        "dev_digest": file_digest(dev_path) if dev_path.is_file() else None,
    }
