"""The pretraining configuration: spaCy's config format, validated on load.

Sections: `[paths]` (corpus, init_from), `[model]` (a `BiLMConfig`), `[head]`,
`[optimizer]`, `[schedule]`, `[batching]` and `[training]`. Every key is checked for
its name, type and range, so a typo fails at load time, not an hour into training.
"""
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Type, TypeVar, Union, cast, get_args, get_type_hints

from thinc.api import Config

from ..nn.config import BiLMConfig

T = TypeVar("T")


@dataclass(frozen=True)
class PathsSettings:
    corpus: str = "corpus"
    """A folder written by `corpus`: train/shard_*.txt, dev.txt, test.txt, vocab.txt."""
    init_from: Optional[str] = None
    """A model directory, a pipeline with an elmo component, or a public .hdf5 (with
    `init_options`) whose biLM weights start the training; the softmax starts fresh."""
    init_options: Optional[str] = None


@dataclass(frozen=True)
class HeadSettings:
    type: str = "sampled"
    """"full" softmax or "sampled" softmax (training only; evaluation is always exact)."""
    n_samples: int = 8192

    def __post_init__(self) -> None:
        _check(self.type in ("full", "sampled"), f"head.type must be 'full' or 'sampled', got {self.type!r}")
        _check(self.n_samples >= 1, "head.n_samples must be positive")


@dataclass(frozen=True)
class OptimizerSettings:
    name: str = "adagrad"
    learning_rate: float = 0.2
    initial_accumulator: float = 1.0
    """Adagrad's starting accumulator, as bilm-tf."""
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _check(self.name in ("adam", "adagrad"), f"optimizer.name must be 'adam' or 'adagrad', got {self.name!r}")
        _check(self.learning_rate > 0, "optimizer.learning_rate must be positive")
        _check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "optimizer.beta1 and beta2 must be in [0, 1)")
        _check(self.eps > 0 and self.initial_accumulator >= 0 and self.weight_decay >= 0, "optimizer.eps must be positive, initial_accumulator and weight_decay not negative")


@dataclass(frozen=True)
class ScheduleSettings:
    warmup_steps: int = 0
    """The learning rate rises linearly from 0 over these steps."""
    decay: str = "constant"
    """After warmup: "constant", "linear" (to `final_fraction` at training.max_steps) or
    "inverse_sqrt" (proportional to 1/sqrt(step))."""
    final_fraction: float = 0.0

    def __post_init__(self) -> None:
        _check(self.warmup_steps >= 0, "schedule.warmup_steps must not be negative")
        _check(self.decay in ("constant", "linear", "inverse_sqrt"), f"schedule.decay must be constant, linear or inverse_sqrt, got {self.decay!r}")
        _check(0 <= self.final_fraction <= 1, "schedule.final_fraction must be in [0, 1]")


@dataclass(frozen=True)
class BatchingSettings:
    tokens_per_batch: int = 4096
    """Padded tokens (rows x longest row) of one global batch, all processes together."""
    max_sentence_tokens: int = 100
    """Longer sentences are cut into consecutive pieces of at most this many tokens."""
    bucket_batches: int = 50
    """Sentences are sorted by length within shuffled chunks of about this many batches."""

    def __post_init__(self) -> None:
        _check(self.tokens_per_batch >= 1, "batching.tokens_per_batch must be positive")
        _check(self.max_sentence_tokens >= 1, "batching.max_sentence_tokens must be positive")
        _check(self.max_sentence_tokens <= self.tokens_per_batch, "batching.max_sentence_tokens must not exceed tokens_per_batch")
        _check(self.bucket_batches >= 1, "batching.bucket_batches must be positive")


@dataclass(frozen=True)
class TrainingSettings:
    seed: int = 0
    dropout: float = 0.1
    grad_clip: float = 10.0
    """Gradient-norm clipping threshold (0: none)."""
    max_steps: int = 0
    """Stop after this many optimizer steps (0: no step limit)."""
    max_seconds: float = 0.0
    """Stop after this much training wall time, summed over resumed runs (0: no limit)."""
    max_epochs: int = 0
    """Stop after this many passes over the training shards (0: no limit)."""
    eval_every: int = 500
    checkpoint_every: int = 500
    log_every: int = 10
    device: str = "cpu"
    """"cpu", "cuda", "cuda:N" or "auto" (cuda when available). Under torchrun each process
    takes the GPU of its LOCAL_RANK."""
    mixed_precision: bool = False
    """bf16 autocast for the training steps (fp32 master weights and optimizer state, fp32
    dev perplexity) where bf16 is native: a GPU, or a CPU with AVX512-BF16 or AMX. Elsewhere
    fp32, with a warning."""
    num_threads: int = 0
    """torch CPU threads per process (0: torch's default)."""
    max_bad_steps: int = 5
    """Stop after this many consecutive steps with a non-finite loss or gradient. Each such
    step is skipped: no optimizer step, and it does not count as a step."""

    def __post_init__(self) -> None:
        _check(0 <= self.dropout < 1, "training.dropout must be in [0, 1)")
        _check(self.grad_clip >= 0, "training.grad_clip must not be negative")
        _check(min(self.max_steps, self.max_seconds, self.max_epochs) >= 0, "training budgets must not be negative")
        _check(self.max_steps or self.max_seconds or self.max_epochs, "set a budget: training.max_steps, max_seconds or max_epochs")
        _check(min(self.eval_every, self.checkpoint_every, self.log_every) >= 1, "eval_every, checkpoint_every and log_every must be positive")
        _check(re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device), f"training.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        _check(self.num_threads >= 0, "training.num_threads must not be negative")
        _check(self.max_bad_steps >= 1, "training.max_bad_steps must be positive")


@dataclass(frozen=True)
class PretrainConfig:
    paths: PathsSettings = field(default_factory=PathsSettings)
    model: BiLMConfig = field(default_factory=BiLMConfig)
    head: HeadSettings = field(default_factory=HeadSettings)
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    batching: BatchingSettings = field(default_factory=BatchingSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)

    def __post_init__(self) -> None:
        _check(
            self.schedule.decay != "linear" or self.training.max_steps > 0,
            "schedule.decay = 'linear' needs training.max_steps",
        )
        _check(not self.model.warm_state, "model.warm_state is set after training (`warm`), not trained")

    def to_dict(self) -> Dict[str, Any]:
        data = {f.name: dataclasses.asdict(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["model"] = self.model.to_dict()
        return data


def load_config(path: Union[str, Path], overrides: Optional[Dict[str, Any]] = None) -> PretrainConfig:
    """Read and validate a pretraining config; `overrides` maps "section.key" to values."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    raw = Config().from_disk(path, overrides=overrides or {})
    return config_from_dict(raw, str(path))


def config_from_dict(raw: Dict[str, Any], source: str = "<config>") -> PretrainConfig:
    sections = {f.name: f for f in dataclasses.fields(PretrainConfig)}
    unknown = sorted(set(raw) - set(sections))
    if unknown:
        raise ValueError(f"{source}: unknown sections {unknown}; expected {sorted(sections)}")
    built: Dict[str, Any] = {}
    for name, section in raw.items():
        if not isinstance(section, dict):
            raise ValueError(f"{source}: [{name}] must be a section")
        try:
            built[name] = _section(cast(type, sections[name].type), section, name)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{source}: {err}") from err
    try:
        return PretrainConfig(**built)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from err


def _section(cls: Type[T], values: Dict[str, Any], name: str) -> T:
    hints = get_type_hints(cls)
    if cls is BiLMConfig:
        filters = values.get("filters", [])
        if not (isinstance(filters, (list, tuple)) and all(_is_filter(f) for f in filters)):
            raise ValueError(f"[model] filters = {filters!r} must be a list of [width, count] integer pairs")
        for key, value in values.items():
            if key != "filters" and key in hints and not _has_type(value, hints[key]):
                raise ValueError(f"[model] {key} = {value!r} is not of type {_type_name(hints[key])}")
        try:
            return cast(T, BiLMConfig.from_dict(values))
        except ValueError as err:
            raise ValueError(f"[model] {err}") from err
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ValueError(f"[{name}] unknown keys {unknown}; expected {sorted(hints)}")
    for key, value in values.items():
        if not _has_type(value, hints[key]):
            raise ValueError(f"[{name}] {key} = {value!r} is not of type {_type_name(hints[key])}")
    return cls(**values)


def _has_type(value: Any, hint: Any) -> bool:
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (Optional[str], Optional[float]):
        return value is None or _has_type(value, get_args(hint)[0])
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def _is_filter(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_has_type(v, int) for v in value)


def _check(condition: Any, message: str) -> None:
    if not condition:
        raise ValueError(message)
