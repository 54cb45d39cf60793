"""The pretraining configuration: spaCy's config format, validated on load by pydantic.

Sections: `[paths]` (corpus, init_from), `[model]` (a `BiLMConfig`), `[head]`,
`[optimizer]`, `[schedule]`, `[batching]` and `[training]`. Every key's spelling, type
and range is checked when the file is read, each problem named as "[section] key = value:
what is wrong", so a typo fails at load time, not an hour into training. Types are
strict: a string is not a number, a boolean not an integer (an integer is a float).
"""

import dataclasses
import typing
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

from pydantic import ConfigDict, Field, PlainValidator, Strict, TypeAdapter, ValidationError, create_model
from pydantic.dataclasses import dataclass
from pydantic_core import ErrorDetails, PydanticCustomError
from thinc.api import Config

from ..devices import TRAINING_DEVICES, check_device
from ..nn.config import BiLMConfig, without_legacy_keys

SECTION = ConfigDict(extra="forbid")
Int = Annotated[int, Strict()]
Positive = Annotated[int, Strict(), Field(ge=1)]
NotNegative = Annotated[int, Strict(), Field(ge=0)]
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
"""A finite float: an infinite learning rate or eps would load and then train to nothing."""
Text = Annotated[str, Strict()]


def _bool_or_auto(value: Any) -> Union[bool, str]:
    if isinstance(value, bool) or value == "auto":
        return value
    raise PydanticCustomError("bool_or_auto", "Input should be true, false or 'auto'")


BoolOrAuto = Annotated[Union[bool, Literal["auto"]], PlainValidator(_bool_or_auto)]


class Resumable:
    """Marks a [training] key that a resumed run may change (`Annotated[..., RESUMABLE]`)."""


RESUMABLE = Resumable()


@dataclass(frozen=True, config=SECTION)
class PathsSettings:
    corpus: Text = "corpus"
    """A folder written by `corpus`: train/shard_*.txt, dev.txt, test.txt, vocab.txt."""
    init_from: Optional[Text] = None
    """A model directory, a pipeline with an elmo component, or a public .hdf5 (with
    `init_options`) whose biLM weights start the training. From a pretraining model
    directory, the softmax rows of the words its vocabulary shares with the corpus's are
    carried over too; the other rows (all of them from a pipeline or public weights) start fresh."""
    init_options: Optional[Text] = None


@dataclass(frozen=True, config=SECTION)
class HeadSettings:
    type: Literal["full", "sampled"] = "sampled"
    """"full" softmax or "sampled" softmax (training only; evaluation is always exact)."""
    n_samples: Positive = 8192
    bias_init: Literal["zeros", "log_uniform"] = "zeros"
    """The softmax bias of a fresh head: "zeros" (bilm-tf) or "log_uniform", each id's log
    probability under the sampler's Zipf distribution over a frequency-sorted vocabulary,
    so that training starts from about the unigram perplexity instead of the vocabulary
    size (rows carried over by `init_from` keep their trained values)."""


@dataclass(frozen=True, config=SECTION)
class OptimizerSettings:
    name: Literal["adam", "adagrad"] = "adagrad"
    learning_rate: Annotated[Number, Field(gt=0)] = 0.2
    initial_accumulator: Annotated[Number, Field(ge=0)] = 1.0
    """Adagrad's starting accumulator, as bilm-tf."""
    beta1: Annotated[Number, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[Number, Field(ge=0, lt=1)] = 0.999
    eps: Annotated[Number, Field(gt=0)] = 1e-8
    weight_decay: Annotated[Number, Field(ge=0)] = 0.0


@dataclass(frozen=True, config=SECTION)
class ScheduleSettings:
    warmup_steps: NotNegative = 0
    """The learning rate rises linearly from 0 over these steps."""
    decay: Literal["constant", "linear", "inverse_sqrt"] = "constant"
    """After warmup: "constant", "linear" (from `decay_start` of `horizon` to
    `final_fraction` at its end) or "inverse_sqrt" (proportional to 1/sqrt(step))."""
    horizon: Literal["steps", "seconds"] = "steps"
    """What a linear decay spans: training.max_steps (after warmup) or training.max_seconds
    (the clock, from the run's start, warmup included). A decay over seconds follows the
    machine: on a slower or busier one it takes fewer steps at other rates, and a resumed
    run is not bitwise the uninterrupted one."""
    final_fraction: Annotated[Number, Field(ge=0, le=1)] = 0.0
    decay_start: Annotated[Number, Field(ge=0, lt=1)] = 0.0
    """Share of the horizon spent at the full rate before a linear decay begins: 0 decays
    from the start, 0.8 holds the rate for 80% of the budget and decays over the last 20%
    (a warmup-stable-decay schedule)."""

    @property
    def budget_key(self) -> str:
        """The [training] budget a linear decay spans: "max_steps" or "max_seconds"."""
        return f"max_{self.horizon}"


@dataclass(frozen=True, config=SECTION)
class BatchingSettings:
    tokens_per_batch: Positive = 4096
    """Padded tokens (rows x longest row) of one global batch, all processes together."""
    max_sentence_tokens: Positive = 100
    """Longer sentences are cut into consecutive pieces of at most this many tokens."""
    bucket_batches: Positive = 50
    """Sentences are sorted by length within shuffled chunks of about this many batches."""

    def __post_init__(self) -> None:
        _check(self.max_sentence_tokens <= self.tokens_per_batch, "max_sentence_tokens must not exceed tokens_per_batch")


@dataclass(frozen=True, config=SECTION)
class TrainingSettings:
    seed: Annotated[Int, Field(ge=0, lt=2**32)] = 0
    """Below 2**32: each process seeds torch with seed * 1000 + its rank, which must fit torch's 64 bits."""
    dropout: Annotated[Number, Field(ge=0, lt=1)] = 0.1
    """Share of every LSTM layer's input and of the top states dropped (bilm-tf's dropout)."""
    weight_drop: Annotated[Number, Field(ge=0, lt=1)] = 0.0
    """Share of every LSTM layer's recurrent weights dropped, one mask per batch (0: off)."""
    grad_clip: Annotated[Number, Field(ge=0)] = 10.0
    """Gradient-norm clipping threshold (0: none)."""
    max_steps: Annotated[NotNegative, RESUMABLE] = 0
    """Stop after this many optimizer steps (0: no step limit)."""
    max_seconds: Annotated[Number, Field(ge=0), RESUMABLE] = 0.0
    """Stop after this much training wall time, summed over resumed runs (0: no limit)."""
    max_epochs: Annotated[NotNegative, RESUMABLE] = 0
    """Stop after this many passes over the training shards (0: no limit)."""
    eval_every: Annotated[Positive, RESUMABLE] = 500
    checkpoint_every: Annotated[Positive, RESUMABLE] = 500
    log_every: Annotated[Positive, RESUMABLE] = 10
    device: Annotated[str, Strict(), RESUMABLE] = "cpu"
    """"cpu", "cuda", "cuda:N" or "auto" (cuda when available). Under torchrun each process
    takes the GPU of its LOCAL_RANK."""
    mixed_precision: Annotated[BoolOrAuto, RESUMABLE] = False
    """bf16 autocast for the training steps (fp32 master weights and optimizer state, fp32
    dev perplexity) where bf16 is native: a GPU, or a CPU with AVX512-BF16 or AMX. Elsewhere
    fp32: with a warning for true, silently for "auto". Like the device, it may change when
    a run resumes."""
    num_threads: Annotated[NotNegative, RESUMABLE] = 0
    """torch CPU threads per process (0: torch's default)."""
    max_bad_steps: Annotated[Positive, RESUMABLE] = 5
    """Stop after this many consecutive steps with a non-finite loss or gradient. Each such
    step is skipped: no optimizer step, and it does not count as a step."""

    def __post_init__(self) -> None:
        _check(self.max_steps or self.max_seconds or self.max_epochs, "set a budget: max_steps, max_seconds or max_epochs")
        check_device(self.device, TRAINING_DEVICES, auto=True, name="device")


@dataclass(frozen=True, config=SECTION)
class PretrainConfig:
    paths: PathsSettings = dataclasses.field(default_factory=PathsSettings)
    model: BiLMConfig = dataclasses.field(default_factory=BiLMConfig)
    head: HeadSettings = dataclasses.field(default_factory=HeadSettings)
    optimizer: OptimizerSettings = dataclasses.field(default_factory=OptimizerSettings)
    schedule: ScheduleSettings = dataclasses.field(default_factory=ScheduleSettings)
    batching: BatchingSettings = dataclasses.field(default_factory=BatchingSettings)
    training: TrainingSettings = dataclasses.field(default_factory=TrainingSettings)

    def __post_init__(self) -> None:
        _check(
            self.schedule.decay != "linear" or getattr(self.training, self.schedule.budget_key) > 0,
            f"schedule.decay = 'linear' needs training.{self.schedule.budget_key} (schedule.horizon = '{self.schedule.horizon}')",
        )
        _check(not self.model.warm_state, "model.warm_state is set after training (`warm`), not trained")

    def to_dict(self) -> Dict[str, Any]:
        data = {f.name: dataclasses.asdict(getattr(self, f.name)) for f in dataclasses.fields(self)}
        data["model"] = self.model.to_dict()
        return data


def resumable_keys() -> Tuple[str, ...]:
    """The [training] keys marked `RESUMABLE`: the budget, the machine, the reporting, the
    tolerance of non-finite steps."""
    hints = typing.get_type_hints(TrainingSettings, include_extras=True)
    return tuple(name for name, hint in hints.items() if any(isinstance(m, Resumable) for m in getattr(hint, "__metadata__", ())))


def load_config(path: Union[str, Path], overrides: Optional[Dict[str, Any]] = None) -> PretrainConfig:
    """Read and validate a pretraining config; `overrides` maps "section.key" to values."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: config file not found")
    raw = Config().from_disk(path, overrides=overrides or {})
    return config_from_dict(raw, str(path))


def config_from_dict(raw: Dict[str, Any], source: str = "<config>") -> PretrainConfig:
    """Validate `raw` (section -> key -> value); a ValueError lists every problem, each
    naming its section and key, after `source`."""
    raw = dict(raw)
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ValueError(f"{source}: unknown sections {unknown}; expected {sorted(_SECTIONS)}")
    problems: List[str] = []
    if "model" in raw:
        try:
            raw["model"] = _bilm_config(raw["model"])
        except ValidationError as err:
            problems += [_describe(("model", *e["loc"]), e) for e in err.errors()]
        except ValueError as err:
            problems.append(f"[model] {err}")
    try:
        config = _PRETRAIN_CONFIG.validate_python(raw)
    except ValidationError as err:
        problems += [_describe(e["loc"], e) for e in err.errors() if not (e["loc"] and e["loc"][0] == "model" and problems)]
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))
    return config


_PRETRAIN_CONFIG = TypeAdapter(PretrainConfig)
_MODEL_SECTION = create_model(  # BiLMConfig's keys and types, strictly (its ranges it checks itself)
    "ModelSection",
    __config__=ConfigDict(extra="forbid", strict=True),
    **{f.name: (typing.get_type_hints(BiLMConfig)[f.name], f.default) for f in dataclasses.fields(BiLMConfig)},  # type: ignore[call-overload]
)


def _bilm_config(section: Any) -> BiLMConfig:
    if not isinstance(section, dict):
        raise ValueError("must be a section")
    checked = _MODEL_SECTION.model_validate(_as_tuples(without_legacy_keys(section)))
    return BiLMConfig(**dict(checked))


def _as_tuples(value: Any) -> Any:
    """Config files write `filters` as lists; BiLMConfig holds tuples."""
    if isinstance(value, dict):
        return {key: _as_tuples(item) for key, item in value.items()}
    return tuple(_as_tuples(item) for item in value) if isinstance(value, list) else value


def _describe(loc: Tuple[Union[int, str], ...], error: ErrorDetails) -> str:
    """One problem as "[section] key = value: what is wrong"."""
    message = error["msg"].removeprefix("Value error, ")
    if not loc:
        return message
    section, key = loc[0], ".".join(str(part) for part in loc[1:])
    if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"[{section}] unknown key {key!r}; expected one of {_KEYS[str(section)]}"
    if not key:
        return f"[{section}] {message}"
    return f"[{section}] {key} = {error['input']!r}: {message}"


_SECTIONS = [f.name for f in dataclasses.fields(PretrainConfig)]
_KEYS = {f.name: sorted(g.name for g in dataclasses.fields(f.type)) for f in dataclasses.fields(PretrainConfig)}  # type: ignore[arg-type]


def _check(condition: Any, message: str) -> None:
    if not condition:
        raise ValueError(message)
