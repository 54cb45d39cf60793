"""Checking stored biLM weights: every problem of a model directory or of a public hdf5 +
options.json pair, what a sound one holds, and a checksum of its weights.

Files are read with this package's readers, so the checks see what loading sees, and they
go on after a problem to list them all. When none is found the loader itself loads the
model, and any error it raises is a problem too. Nothing is unpickled.
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

import numpy

from ..nn.bilm import BiLM, bilm_skeleton
from ..nn.chars import N_CHARACTER_IDS
from ..nn.config import BiLMConfig
from ..nn.special_tokens import SPECIAL_TOKENS
from ..nn.word_encoder import check_words
from .errors import ModelFileError
from .model_dir import CONFIG_FILE, WEIGHTS_FILE, WORDS_FILE, load_model, load_model_config, read_arrays, read_words
from .options import read_options
from .public_hdf5 import check_no_extra_layers, load_public_model, weight_table

if TYPE_CHECKING:
    import h5py

T = TypeVar("T")
WORD_TABLE = "token_encoder.embedding.weight"
CHECKSUM_COVERS = (
    "sha256 over the biLM's tensors in name order (each name, shape and float32 little-endian values; "
    "the names of weights.npz): the same for the same weights in a model directory, a pipeline, public "
    "hdf5 or a checkpoint; the softmax, the optimizer state and the configuration are not covered"
)
Shape = Tuple[Optional[int], ...]
"""A tensor shape; None where any size fits."""


@dataclass
class Report:
    """What a path holds (`facts`: label -> description, in order) and what is wrong with it."""

    path: Path
    kind: str
    facts: Dict[str, str] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)

    def attempt(self, action: Callable[[], T], errors: Tuple[Type[Exception], ...] = (ModelFileError,)) -> Optional[T]:
        """`action()`, or None with the error it raised (one of `errors`, whose message names
        the file) recorded as a problem."""
        try:
            return action()
        except errors as err:
            self.problems.append(str(err))
            return None

    def problem(self, source: object, text: str) -> None:
        self.problems.append(f"{source}: {text}")


def weights_checksum(bilm: BiLM) -> str:
    """See CHECKSUM_COVERS."""
    digest = hashlib.sha256()
    for name, tensor in sorted(bilm.state_dict().items()):
        values = numpy.ascontiguousarray(tensor.detach().float().cpu().numpy(), dtype="<f4")
        digest.update(f"{name}\0{list(values.shape)}\0".encode("utf-8"))
        digest.update(values.tobytes())
    return digest.hexdigest()


def describe_bilm(bilm: BiLM) -> Dict[str, str]:
    """The shapes and size of a loaded biLM, as report facts."""
    config = bilm.config
    if bilm.words is not None:
        encoder = f"word table, {len(bilm.words)} words of width {config.projection_dim}"
        vocabulary = f"{len(bilm.words)} words"
    else:
        widths = [width for width, _ in config.filters]
        encoder = (
            f"char-CNN, {config.n_filters} filters of widths {min(widths)}-{max(widths)} over {config.char_embedding_dim}-wide "
            f"character embeddings, {config.n_highway} highway layers, projection to {config.projection_dim}, "
            f"up to {config.max_characters_per_token} characters per token"
        )
        vocabulary = f"{N_CHARACTER_IDS} character ids (open vocabulary)"
    return {
        "token encoder": encoder,
        "LSTM": (
            f"{config.n_layers} layers per direction, {config.lstm_dim} cells projected to {config.projection_dim}, "
            f"skip connections {'on' if config.use_skip_connections else 'off'}, cell clip {config.cell_clip}, "
            f"projection clip {config.proj_clip}" + (", warm initial state" if config.warm_state else "")
        ),
        "output": f"{bilm.n_output_layers} layers of width {config.output_dim}",
        "vocabulary": vocabulary,
        "parameters": f"{sum(p.numel() for p in bilm.parameters()):,} (biLM)",
    }


def expected_shapes(config: BiLMConfig) -> Dict[str, Shape]:
    """name -> shape of every tensor a biLM of `config` stores (any number of word-table rows);
    nothing is allocated, whatever sizes the configuration asks for."""
    words = list(SPECIAL_TOKENS) if config.token_encoder == "words" else None
    skeleton = bilm_skeleton(config, words)
    shapes: Dict[str, Shape] = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    if words is not None:
        shapes[WORD_TABLE] = (None, *shapes[WORD_TABLE][1:])
    return shapes


def value_problems(arrays: Mapping[str, numpy.ndarray], source: object) -> List[str]:
    """A problem for every array that is not floating point or holds NaN or infinite values,
    or values beyond float32's range (the biLM's weights are float32)."""
    problems = []
    for name, array in sorted(arrays.items()):
        if array.dtype.kind != "f":
            problems.append(f"{source}: {name} has dtype {array.dtype}, expected floating point")
            continue
        nan, infinite = int(numpy.isnan(array).sum()), int(numpy.isinf(array).sum())
        if nan or infinite:
            problems.append(f"{source}: {name} holds {nan} NaN and {infinite} infinite values")
        elif array.dtype.itemsize > 4 and array.size and float(numpy.abs(array).max()) > float(numpy.finfo(numpy.float32).max):
            problems.append(f"{source}: {name} holds values beyond float32's range")
    return problems


def shape_problems(arrays: Mapping[str, numpy.ndarray], expected: Mapping[str, Shape], source: object, config_source: object) -> List[str]:
    """A problem for every tensor missing, unexpected or of another shape than `expected`."""
    problems = []
    missing = sorted(set(expected) - set(arrays))
    unexpected = sorted(set(arrays) - set(expected))
    if missing:
        problems.append(f"{source}: lacks the tensors {missing} that {config_source} calls for")
    if unexpected:
        problems.append(f"{source}: holds the tensors {unexpected}, which {config_source} does not describe")
    for name in sorted(set(arrays) & set(expected)):
        shape, wanted = tuple(arrays[name].shape), expected[name]
        if len(shape) != len(wanted) or any(w is not None and s != w for s, w in zip(shape, wanted)):
            described = tuple("any" if w is None else w for w in wanted)
            problems.append(f"{source}: {name} has shape {shape}, {config_source} calls for {described}")
    return problems


def word_problems(words: Sequence[str], arrays: Optional[Mapping[str, numpy.ndarray]], words_source: object, source: object) -> List[str]:
    """Problems of a word-level biLM's vocabulary: invalid, or not one word per table row."""
    try:
        check_words(words)
    except ValueError as err:
        return [f"{words_source}: invalid word vocabulary ({err})"]
    table = None if arrays is None else arrays.get(WORD_TABLE)
    if table is not None and table.shape[:1] != (len(words),):
        return [f"{words_source}: lists {len(words)} words, {source} has {table.shape[0]} rows in {WORD_TABLE}"]
    return []


def check_model_dir(path: Path, report: Report) -> Optional[BiLM]:
    """Record every problem of a model directory's config.json, weights.npz and words.json;
    the loaded biLM when there is none."""
    config = report.attempt(lambda: load_model_config(path))
    weights_path = path / WEIGHTS_FILE
    arrays = None
    if weights_path.is_file():
        arrays = report.attempt(lambda: read_arrays(weights_path.read_bytes(), weights_path))
    else:
        report.problem(weights_path, "weight file not found")
    if arrays is not None:
        report.problems += value_problems(arrays, weights_path)
    if config is not None and arrays is not None:
        report.problems += shape_problems(arrays, expected_shapes(config), weights_path, path / CONFIG_FILE)
    if config is not None and config.token_encoder == "words":
        words = report.attempt(lambda: read_words(path / WORDS_FILE))
        if words is not None:
            report.problems += word_problems(words, arrays, path / WORDS_FILE, weights_path)
    return None if report.problems else report.attempt(lambda: load_model(path))


def check_public(weights: Path, options: Path, report: Report) -> Optional[BiLM]:
    """Record every problem of a public hdf5 weight file and its options.json; the loaded
    biLM when there is none."""
    import h5py

    config = report.attempt(lambda: read_options(options))
    if not weights.is_file():
        report.problem(weights, "weight file not found")
        return None
    try:
        handle = h5py.File(weights, "r")
    except OSError as err:
        report.problem(weights, f"not a readable HDF5 weight file, it may be truncated or corrupt ({err})")
        return None
    with handle:
        datasets = _float_datasets(handle, weights, report)
        if config is not None:
            _check_public_layout(handle, datasets, config, weights, options, report)
    return None if report.problems else report.attempt(lambda: load_public_model(options, weights))


def _float_datasets(handle: "h5py.File", weights: Path, report: Report) -> Dict[str, numpy.ndarray]:
    """Every readable floating-point dataset of the file; unreadable ones and NaN or
    infinite values recorded as problems."""
    import h5py

    names: List[str] = []
    handle.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    arrays = {}
    for name in names:
        dataset = handle[name]
        if dataset.dtype.kind != "f":
            continue
        try:
            arrays[name] = numpy.asarray(dataset[...])
        except (OSError, KeyError) as err:
            report.problem(weights, f"dataset {name!r} cannot be read, the file may be truncated ({err})")
    report.problems += value_problems(arrays, weights)
    return arrays


def _check_public_layout(handle: "h5py.File", datasets: Mapping[str, numpy.ndarray], config: BiLMConfig, weights: Path, options: Path, report: Report) -> None:
    """A problem for every dataset the options call for that is missing, not floating point
    or of another shape, and for layers the options do not describe."""
    import h5py

    for name, entry in weight_table(bilm_skeleton(config)).items():  # the options are not trusted yet
        expected = entry.public_shape()
        if name not in handle:
            report.problem(weights, f"dataset {name!r} is missing; the options in {options} call for it")
        elif name in datasets and datasets[name].shape != expected:
            report.problem(weights, f"dataset {name!r} has shape {datasets[name].shape}, the options in {options} call for {expected}")
        elif name not in datasets and not (isinstance(handle[name], h5py.Dataset) and handle[name].dtype.kind == "f"):
            report.problem(weights, f"{name!r} is not a floating-point dataset")
    report.attempt(lambda: check_no_extra_layers(handle, config, weights, options))
