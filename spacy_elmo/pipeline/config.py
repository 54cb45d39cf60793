"""Validation of the `elmo` component's settings, with errors that say what to change."""

from dataclasses import dataclass
from typing import Any, Dict, Literal, Optional, Tuple, Union, get_args

import numpy
import torch

from ..devices import INFERENCE_DEVICES, pick_device
from ..nn.precision import Precision, check_precision

MixName = Literal["average", "top"]
MixSetting = Union[MixName, int, Dict[str, Any]]
LayerCacheMode = Literal["training", "always", "never"]
LAYER_CACHE_MODES: Tuple[str, ...] = get_args(LayerCacheMode)
INTEGER_SETTINGS = ("batch_tokens", "window_size", "window_overlap", "num_threads", "token_cache_size", "layer_cache_bytes", "layer_cache_spill_bytes")
MAX_THREADS = 1024
"""The most torch threads `num_threads` may ask for: OpenMP aborts the process, with no
Python error, where it cannot start as many as asked."""


@dataclass(frozen=True)
class LayerMix:
    """Normalized layer weights and scale: mixed = gamma * sum_j weights[j] * layers[j]."""

    weights: numpy.ndarray
    gamma: float

    def apply(self, layers: numpy.ndarray) -> numpy.ndarray:
        """(n_layers, ..., width) -> (..., width) float32: the mixed vectors."""
        return (self.gamma * numpy.tensordot(self.weights, layers, axes=1)).astype(numpy.float32)

    @classmethod
    def from_setting(cls, setting: MixSetting, n_layers: int) -> "LayerMix":
        """`"average"`, `"top"`, a layer index (negative counts from the top), or
        `{"weights": [...n_layers...], "gamma": float}` with the weights used as given."""
        if isinstance(setting, str):
            if setting == "average":
                return cls(numpy.full(n_layers, 1.0 / n_layers, dtype=numpy.float32), 1.0)
            if setting == "top":
                return cls.from_setting(n_layers - 1, n_layers)
            raise ValueError(f"mix must be 'average', 'top', a layer index or {{'weights', 'gamma'}}; got {setting!r}")
        if isinstance(setting, bool):
            raise ValueError(f"mix must not be a boolean, got {setting!r}")
        if isinstance(setting, int):
            if not -n_layers <= setting < n_layers:
                raise ValueError(f"mix layer index {setting} is out of range for a model with {n_layers} layers")
            weights = numpy.zeros(n_layers, dtype=numpy.float32)
            weights[setting] = 1.0
            return cls(weights, 1.0)
        if isinstance(setting, dict):
            unknown = set(setting) - {"weights", "gamma"}
            if unknown or "weights" not in setting:
                raise ValueError(f"an explicit mix needs 'weights' and optionally 'gamma', got keys {sorted(setting)}")
            given_weights, gamma = finite_numbers(setting["weights"]), finite_numbers(setting.get("gamma", 1.0))
            if given_weights is None or given_weights.shape != (n_layers,):
                raise ValueError(f"mix weights must be {n_layers} finite numbers, got {setting['weights']!r}")
            if gamma is None or gamma.shape != ():
                raise ValueError(f"a mix's gamma must be a finite number, got {setting['gamma']!r}")
            return cls(given_weights, float(gamma))
        raise ValueError(f"unsupported mix setting {setting!r}")

    @staticmethod
    def check_syntax(setting: MixSetting) -> None:
        """Errors a mix setting has whatever the model's depth."""
        if isinstance(setting, int) and not isinstance(setting, bool):
            return
        if isinstance(setting, dict) and "weights" in setting:
            given = setting["weights"]
            if not isinstance(given, (list, tuple)):
                raise ValueError(f"mix weights must be a list of finite numbers, one per layer, got {given!r}")
            LayerMix.from_setting(setting, len(given))
            return
        LayerMix.from_setting(setting, 1)


def finite_numbers(value: Any) -> Optional[numpy.ndarray]:
    """`value` as a float32 array when it is a number or a list of numbers, all finite; else None."""
    if isinstance(value, (str, bytes, bool)) or value is None:
        return None
    try:
        array = numpy.asarray(value, dtype=numpy.float32)
    except (TypeError, ValueError):
        return None
    return array if numpy.all(numpy.isfinite(array)) else None


@dataclass(frozen=True)
class ElmoSettings:
    """Everything the `elmo` factory takes besides the weights' location."""

    mix: MixSetting = "average"
    keep_layers: bool = True
    set_tensor: bool = False
    similarity_hooks: bool = True
    batch_tokens: int = 4096
    use_sentences: bool = True
    window_size: int = 128
    window_overlap: int = 32
    device: str = "cpu"
    num_threads: int = 0
    token_cache_size: int = 20000
    precision: Precision = "fp32"
    layer_cache: LayerCacheMode = "training"
    layer_cache_bytes: int = 2 * 1024**3
    layer_cache_spill_bytes: int = 0
    layer_cache_dir: Optional[str] = None

    def __post_init__(self) -> None:
        for name in INTEGER_SETTINGS:  # a config's quoted "2" passes spaCy's validation as an int but arrives as the string
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        LayerMix.check_syntax(self.mix)
        if self.batch_tokens < 1:
            raise ValueError(f"batch_tokens must be positive, got {self.batch_tokens}")
        if self.window_size < 1:
            raise ValueError(f"window_size must be positive, got {self.window_size}")
        if self.window_size > self.batch_tokens:
            raise ValueError(f"batch_tokens ({self.batch_tokens}) must be at least window_size ({self.window_size}): a batch holds at least one window")
        if not 0 <= self.window_overlap < self.window_size:
            raise ValueError(f"window_overlap must be at least 0 and below window_size ({self.window_size}), got {self.window_overlap}")
        if not 0 <= self.num_threads <= MAX_THREADS:
            raise ValueError(f"num_threads must be 0 (leave torch's setting) or a count up to {MAX_THREADS}, got {self.num_threads}")
        if self.token_cache_size < 0:
            raise ValueError(f"token_cache_size must be 0 (no cache) or positive, got {self.token_cache_size}")
        if self.layer_cache not in LAYER_CACHE_MODES:
            raise ValueError(f"layer_cache must be one of {LAYER_CACHE_MODES}, got {self.layer_cache!r}")
        for name in ("layer_cache_bytes", "layer_cache_spill_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or positive, got {getattr(self, name)}")
        check_precision(self.precision, self.torch_device)

    @property
    def torch_device(self) -> torch.device:
        """The device the biLM runs on (checked: torch can use it here)."""
        return pick_device(self.device, INFERENCE_DEVICES)
