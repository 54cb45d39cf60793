"""Hyperparameters of an ELMo biLM, independent of any file format."""

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, get_args

from .chars import check_character_count

Activation = Literal["relu", "tanh"]
TokenEncoderKind = Literal["characters", "words"]
ACTIVATIONS: Tuple[str, ...] = get_args(Activation)
TOKEN_ENCODERS: Tuple[str, ...] = get_args(TokenEncoderKind)
LEGACY_KEYS: Dict[str, Callable[[Any], None]] = {"n_characters": check_character_count}
"""Keys that configs written by earlier versions hold, with the check of their value: the
character table always has 262 rows (`nn.chars.N_CHARACTER_IDS`), whatever they say."""


@dataclass(frozen=True)
class BiLMConfig:
    """Shape of a biLM: a token encoder plus forward/backward LSTM stacks.

    `token_encoder` is "characters" (the char-CNN: every string has its own vector) or
    "words" (a learned vector per word of a fixed vocabulary, `<UNK>` for the rest; the
    char-CNN keys are then unused, though still checked). `filters` holds `(width, n_filters)` pairs.
    `projection_dim` (P) is the width of the token encoding and of each LSTM output;
    `lstm_dim` is the LSTM cell size.
    """

    token_encoder: TokenEncoderKind = "characters"
    filters: Tuple[Tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
    char_embedding_dim: int = 16
    n_highway: int = 1
    activation: Activation = "relu"
    max_characters_per_token: int = 50
    lstm_dim: int = 1024
    projection_dim: int = 128
    n_layers: int = 2
    cell_clip: Optional[float] = 3.0
    proj_clip: Optional[float] = 3.0
    use_skip_connections: bool = True
    warm_state: bool = False
    """True when the model carries a fixed initial LSTM state (see `nn.warm_state`)."""

    def __post_init__(self) -> None:
        type_problems = _type_problems(self)
        if type_problems:  # the checks below compare numbers
            raise ValueError("Invalid biLM configuration: " + "; ".join(type_problems))
        object.__setattr__(self, "filters", tuple((int(w), int(n)) for w, n in self.filters))
        for name in INTEGER_FIELDS:  # 2 and 2.0 are one setting
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in CLIP_FIELDS:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        problems = []
        if self.token_encoder not in TOKEN_ENCODERS:
            problems.append(f"token_encoder must be one of {TOKEN_ENCODERS}, got {self.token_encoder!r}")
        if not self.filters:
            problems.append("filters must not be empty")
        if any(w < 1 or n < 1 for w, n in self.filters):
            problems.append(f"filter widths and counts must be positive, got {self.filters}")
        if any(w > self.max_characters_per_token for w, _ in self.filters):
            problems.append("a filter is wider than max_characters_per_token")
        if self.max_characters_per_token < 3:
            problems.append("max_characters_per_token must be at least 3")
        counts = {"n_layers": self.n_layers, "n_highway": self.n_highway, "the number of filters": len(self.filters)}
        problems += [f"{name} must be at most {MAX_LAYERS}, got {count}" for name, count in counts.items() if count > MAX_LAYERS]
        if self.max_characters_per_token > MAX_CHARACTERS_PER_TOKEN:
            problems.append(f"max_characters_per_token must be at most {MAX_CHARACTERS_PER_TOKEN} (longer tokens are cut to it)")
        sizes = {name: getattr(self, name) for name in INTEGER_FIELDS if name != "max_characters_per_token"}
        sizes["filter widths and counts"] = max((max(w, n) for w, n in self.filters), default=0)
        problems += [f"{name} must be below 2**31" for name, size in sizes.items() if size > LARGEST_SIZE]
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        for name in ("char_embedding_dim", "lstm_dim", "projection_dim", "n_layers"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be positive")
        if self.n_highway < 0:
            problems.append("n_highway must not be negative")
        if self.projection_dim > self.lstm_dim:
            problems.append("projection_dim must not exceed lstm_dim")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and not (0 < value < math.inf):  # NaN fails too
                problems.append(f"{name} must be a positive finite number or None")
        if problems:
            raise ValueError("Invalid biLM configuration: " + "; ".join(problems))

    @property
    def n_filters(self) -> int:
        """Width of the concatenated char-CNN output."""
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every layer the user sees: 2 * projection_dim."""
        return 2 * self.projection_dim

    @property
    def n_output_layers(self) -> int:
        """Layers the user sees: the token encoding, then each LSTM layer."""
        return self.n_layers + 1

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["filters"] = [list(f) for f in self.filters]
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "BiLMConfig":
        if not isinstance(data, dict):
            raise ValueError(f"Invalid biLM configuration: must be an object of settings, got {type(data).__name__}")
        data = without_legacy_keys(data)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"Unknown biLM configuration keys: {unknown}")
        return cls(**known)


MAX_CHARACTERS_PER_TOKEN = 1000
"""The most characters of a token a char-CNN may read (bilm-tf reads 50): every token's ids
are an array of this many."""
MAX_LAYERS = 1000
"""The most LSTM layers, highway layers or CNN filters a configuration may ask for:
what a file that asks for more holds is never a biLM, and building one would take hours."""
LARGEST_SIZE = 2**31 - 1
"""The largest width, count or length a configuration may ask for (torch's int32 sizes)."""
INTEGER_FIELDS = ("char_embedding_dim", "n_highway", "max_characters_per_token", "lstm_dim", "projection_dim", "n_layers")
BOOLEAN_FIELDS = ("use_skip_connections", "warm_state")
CLIP_FIELDS = ("cell_clip", "proj_clip")


def _is_integer(value: Any) -> bool:
    """An int, or a float with no fractional part (2.0); not a bool."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _type_problems(config: BiLMConfig) -> List[str]:
    """What in `config` has the wrong type (a file's 2.5 for a layer count, "false" for a
    flag, which would otherwise load as True)."""
    problems = [f"{name} must be an integer, got {getattr(config, name)!r}" for name in INTEGER_FIELDS if not _is_integer(getattr(config, name))]
    problems += [f"{name} must be true or false, got {getattr(config, name)!r}" for name in BOOLEAN_FIELDS if not isinstance(getattr(config, name), bool)]
    for name in CLIP_FIELDS:
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            problems.append(f"{name} must be a number or None, got {value!r}")
    filters = config.filters
    if not isinstance(filters, (list, tuple)) or not all(isinstance(f, (list, tuple)) and len(f) == 2 and all(map(_is_integer, f)) for f in filters):
        problems.append(f"filters must be (width, count) pairs of integers, got {filters!r}")
    return problems


def without_legacy_keys(data: Dict[str, Any]) -> Dict[str, Any]:
    """`data` less the `LEGACY_KEYS`; ValueError if one holds a value it never could."""
    for key, check in LEGACY_KEYS.items():
        if key in data:
            try:
                check(data[key])
            except ValueError as err:
                raise ValueError(f"Invalid biLM configuration: {err}") from err
    return {key: value for key, value in data.items() if key not in LEGACY_KEYS}
