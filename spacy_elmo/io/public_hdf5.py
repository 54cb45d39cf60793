"""The public ELMo weight file (bilm-tf / AllenNLP hdf5), read into and written from a `BiLM`.

Layout of the file, for a biLM with F filters, K highways and L LSTM layers:
  char_embed                         (261, char_dim)         no row for the padded token
  CNN/W_cnn_{i}, CNN/b_cnn_{i}       (1, width, char_dim, n), (n,)
  CNN_high_{k}/W_transform, b_transform, W_carry, b_carry    x @ W convention
  CNN_proj/W_proj, b_proj            (n_filters, P), (P,)     absent when n_filters == P
  RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0   (in + P, 4H), gates i, j, f, o
                                             .../B     (4H,), without the constant forget bias 1
                                             .../W_P_0 (H, P)  absent when H == P
d = 0 is the forward direction, 1 the backward one.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Tuple, Union, cast

import numpy
import torch

from ..nn.bilm import BiLM, bilm_skeleton
from ..nn.config import BiLMConfig
from ..nn.lstm import ProjectedLSTM
from ..nn.token_encoder import Highway, TokenEncoder
from .errors import ModelFileError
from .options import options_from_config, read_options, write_options
from .staging import staged_file

if TYPE_CHECKING:
    import h5py

Converter = Callable[[numpy.ndarray], numpy.ndarray]
GATE_ORDER = [0, 2, 1, 3]
"""bilm-tf gates (i, j, f, o) <-> our gates (i, f, g, o); the permutation is its own inverse."""


@dataclass
class _Entry:
    """One public dataset: how to read/write it in torch layout and convert between layouts."""

    read: Callable[[], numpy.ndarray]
    write: Callable[[numpy.ndarray], None]
    to_torch: Converter
    to_public: Converter
    public_shape: Callable[[], Tuple[int, ...]]
    """The dataset's shape, read off the parameters' shapes: nothing is allocated or read
    (the parameters may be on the meta device)."""


def _param_entry(param: torch.Tensor, to_torch: Converter, to_public: Converter) -> _Entry:
    """`to_public` must be a view (transpose, slice, new axis) or keep the shape."""

    def write(value: numpy.ndarray) -> None:
        param.data.copy_(torch.from_numpy(numpy.ascontiguousarray(value, dtype=numpy.float32)))

    def public_shape() -> Tuple[int, ...]:
        return tuple(to_public(_stand_in(tuple(param.shape))).shape)

    return _Entry(lambda: param.detach().cpu().numpy(), write, to_torch, to_public, public_shape)


def _stand_in(shape: Tuple[int, ...]) -> numpy.ndarray:
    """A read-only array of `shape` that takes no memory (every element is one zero)."""
    return numpy.broadcast_to(numpy.float32(0), shape)


def _lstm_weight_entry(lstm: ProjectedLSTM, cell_dim: int) -> _Entry:
    """W_0 packs the input and recurrent matrices side by side."""

    def read() -> numpy.ndarray:
        return torch.cat([lstm.input_weight, lstm.recurrent_weight], dim=1).detach().cpu().numpy()

    def write(value: numpy.ndarray) -> None:
        tensor = torch.from_numpy(numpy.ascontiguousarray(value, dtype=numpy.float32))
        lstm.input_weight.data.copy_(tensor[:, : lstm.input_dim])
        lstm.recurrent_weight.data.copy_(tensor[:, lstm.input_dim :])

    def public_shape() -> Tuple[int, ...]:
        return (lstm.input_weight.shape[1] + lstm.recurrent_weight.shape[1], lstm.input_weight.shape[0])

    return _Entry(read, write, lambda a: _reorder_gates(a.T, cell_dim), lambda a: _reorder_gates(a, cell_dim).T, public_shape)


def _reorder_gates(array: numpy.ndarray, cell_dim: int) -> numpy.ndarray:
    """Permute the four gate blocks of axis 0. Along an axis of stride 0 (a `_stand_in`)
    the blocks are one and the same, and the array is returned as it is."""
    if array.strides[0] == 0:
        return array
    blocks = [array[k * cell_dim : (k + 1) * cell_dim] for k in range(4)]
    return numpy.concatenate([blocks[k] for k in GATE_ORDER])


def weight_table(bilm: BiLM) -> Dict[str, _Entry]:
    """public dataset name -> how it maps onto `bilm` (ValueError for a word-level biLM)."""
    options_from_config(bilm.config)
    encoder = bilm.token_encoder
    assert isinstance(encoder, TokenEncoder), "options_from_config refuses word-level models"
    h = bilm.config.lstm_dim
    transpose: Converter = numpy.transpose
    same: Converter = lambda a: a  # noqa: E731
    table = {
        "char_embed": _param_entry(
            encoder.char_embedding.weight,
            lambda a: numpy.concatenate([numpy.zeros_like(a[:1]), a]),
            lambda a: a[1:],
        )
    }
    for i, conv in enumerate(encoder.cnn.conv_layers()):
        table[f"CNN/W_cnn_{i}"] = _param_entry(conv.weight, lambda a: a[0].transpose(2, 1, 0), lambda a: a.transpose(2, 1, 0)[None])
        table[f"CNN/b_cnn_{i}"] = _param_entry(cast(torch.Tensor, conv.bias), same, same)
    for k, highway in enumerate(cast(List[Highway], list(encoder.highways))):
        table[f"CNN_high_{k}/W_transform"] = _param_entry(highway.transform.weight, transpose, transpose)
        table[f"CNN_high_{k}/b_transform"] = _param_entry(highway.transform.bias, same, same)
        table[f"CNN_high_{k}/W_carry"] = _param_entry(highway.gate.weight, transpose, transpose)
        table[f"CNN_high_{k}/b_carry"] = _param_entry(highway.gate.bias, same, same)
    if encoder.projection is not None:
        table["CNN_proj/W_proj"] = _param_entry(encoder.projection.weight, transpose, transpose)
        table["CNN_proj/b_proj"] = _param_entry(encoder.projection.bias, same, same)
    for d, stack in enumerate((bilm.forward_stack, bilm.backward_stack)):
        for layer, lstm in enumerate(cast(List[ProjectedLSTM], list(stack.layers))):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            table[f"{prefix}/W_0"] = _lstm_weight_entry(lstm, h)
            reorder: Converter = lambda a: _reorder_gates(a, h)  # noqa: E731
            table[f"{prefix}/B"] = _param_entry(lstm.bias, reorder, reorder)
            if lstm.projection is not None:
                table[f"{prefix}/W_P_0"] = _param_entry(lstm.projection, transpose, transpose)
    return table


def load_public_weights(bilm: BiLM, weight_file: Union[str, Path], options_file: Union[str, Path] = "options") -> None:
    """Fill `bilm` from a public hdf5 file; every dataset is checked against the config."""
    table = weight_table(bilm)  # first: it refuses what the format cannot hold
    with _open_weights(weight_file) as handle:
        _check_layout(handle, table, bilm.config, Path(weight_file), options_file)
        _fill(handle, table, Path(weight_file))


def _fill(handle: "h5py.File", table: Dict[str, _Entry], path: Path) -> None:
    """Write every dataset of a file `_check_layout` accepted into the tensors of `table`."""
    for name, entry in table.items():
        try:
            stored = numpy.asarray(handle[name][...], dtype=numpy.float32)
        except (OSError, KeyError) as err:
            raise ModelFileError(path, f"dataset {name!r} cannot be read, the file may be truncated ({err})") from err
        if not numpy.all(numpy.isfinite(stored)):
            raise ModelFileError(path, f"dataset {name!r} holds NaN or infinite values")
        entry.write(entry.to_torch(stored))


def _open_weights(weight_file: Union[str, Path]) -> "h5py.File":
    import h5py

    path = Path(weight_file)
    if not path.is_file():
        raise ModelFileError(path, "weight file not found")
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise ModelFileError(path, f"not a readable HDF5 weight file, it may be truncated or corrupt ({err})") from err


def _check_layout(handle: "h5py.File", table: Dict[str, _Entry], config: BiLMConfig, path: Path, options_file: Union[str, Path]) -> None:
    import h5py

    check_no_extra_layers(handle, config, path, options_file)
    for name, entry in table.items():
        if name not in handle:
            raise ModelFileError(path, f"dataset {name!r} is missing; the options in {options_file} do not match these weights")
        dataset = handle[name]
        if not isinstance(dataset, h5py.Dataset) or dataset.dtype.kind != "f":
            raise ModelFileError(path, f"{name!r} is not a floating-point dataset")
        expected = entry.public_shape()
        if dataset.shape != expected:
            raise ModelFileError(path, f"dataset {name!r} has shape {dataset.shape}, but the options in {options_file} call for {expected}")


def check_no_extra_layers(handle, config: BiLMConfig, path: Path, options_file) -> None:
    directions = ("RNN_0", "RNN_1")
    extras = [f"CNN/W_cnn_{len(config.filters)}", f"CNN_high_{config.n_highway}"]
    extras += [f"{rnn}/RNN/MultiRNNCell/Cell{config.n_layers}" for rnn in directions]
    if config.n_filters == config.projection_dim:
        extras.append("CNN_proj")
    if config.lstm_dim == config.projection_dim:
        extras += [f"{rnn}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/W_P_0" for rnn in directions for layer in range(config.n_layers)]
    for name in extras:
        if name in handle:
            raise ModelFileError(path, f"holds {name!r}, which the options in {options_file} do not describe")


def save_public_weights(bilm: BiLM, weight_file: Union[str, Path]) -> None:
    """Write `bilm` as a public hdf5 weight file that bilm-tf and AllenNLP read, whole or
    not at all (`staged_file`: a failed write is a `WriteError` and keeps the file there)."""
    table = weight_table(bilm)  # first: it refuses what the format cannot hold
    with staged_file(weight_file) as staging:
        _write_weight_table(table, staging)


def _write_weight_table(table: Dict[str, _Entry], path: Path) -> None:
    import h5py

    with h5py.File(path, "w") as handle:
        for name, entry in table.items():
            handle.create_dataset(name, data=entry.to_public(entry.read()).astype(numpy.float32))


def load_public_model(options_file: Union[str, Path], weight_file: Union[str, Path]) -> BiLM:
    """Build a `BiLM` from an options.json + weights.hdf5 pair."""
    config = read_options(options_file)
    with _open_weights(weight_file) as handle:
        # the file's headers are checked against a skeleton first: options of absurd sizes are refused, not allocated
        _check_layout(handle, weight_table(bilm_skeleton(config)), config, Path(weight_file), options_file)
        bilm = BiLM(config)
        _fill(handle, weight_table(bilm), Path(weight_file))
    return bilm.eval()


def save_public_model(bilm: BiLM, options_file: Union[str, Path], weight_file: Union[str, Path]) -> None:
    """Write options.json and weights.hdf5 (their folders created), both written in full
    beside their places before either is renamed into place (`staged_file`): a failed write
    keeps both files there. ValueError, before anything is written, for a biLM the public
    format cannot hold, or for a place where a folder lies (only the second rename could
    find out, after the first)."""
    table = weight_table(bilm)
    for target in (Path(options_file), Path(weight_file)):
        if target.is_dir():
            raise ValueError(f"{target} is a folder: give the public pair's two files other places")
    with staged_file(options_file) as options_staging, staged_file(weight_file) as weights_staging:
        write_options(bilm.config, options_staging)
        _write_weight_table(table, weights_staging)
