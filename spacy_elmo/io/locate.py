"""Finding a biLM's weights: a model directory, a saved pipeline holding one, or a public
ELMo hdf5 file with its options.json."""

from pathlib import Path
from typing import Optional, Tuple, Union

from ..nn.bilm import BiLM
from ..nn.config import BiLMConfig
from .errors import ModelFileError
from .model_dir import find_model_dir, is_model_dir, load_model, load_model_config
from .options import read_options
from .public_hdf5 import load_public_model

PathLike = Union[str, Path]
COMPONENT_SETTINGS = ("weights", "options")
"""How errors call the weights and the options unless the caller names its own settings."""


def load_bilm(weights: PathLike, options: Optional[PathLike] = None, names: Tuple[str, str] = COMPONENT_SETTINGS) -> BiLM:
    """The biLM at `weights`: a model directory, a saved pipeline with an elmo component,
    or a public hdf5 file with its options.json. `names` are the two settings as errors
    call them."""
    path, options_path = locate_bilm(weights, options, names)
    return load_model(path) if options_path is None else load_public_model(options_path, path)


def bilm_config(weights: PathLike, options: Optional[PathLike] = None, names: Tuple[str, str] = COMPONENT_SETTINGS) -> BiLMConfig:
    """The configuration of the biLM `load_bilm` would load, without reading its weights."""
    path, options_path = locate_bilm(weights, options, names)
    return load_model_config(path) if options_path is None else read_options(options_path)


def _is_hdf5(path: Path) -> bool:
    import h5py

    return bool(h5py.is_hdf5(path))


def locate_bilm(weights: PathLike, options: Optional[PathLike], names: Tuple[str, str] = COMPONENT_SETTINGS) -> Tuple[Path, Optional[Path]]:
    """(model directory, None), or (public .hdf5 file, its options.json)."""
    weights_name, options_name = names
    if not weights:
        raise ValueError(
            f"no '{weights_name}' given: give a spacy-elmo model directory, or a public ELMo .hdf5 file together with '{options_name}' (its options.json)"
        )
    path = Path(weights)
    if path.is_dir():
        if options:
            raise ValueError(f"'{options_name}' is only used with a public .hdf5 file, but '{weights_name}' ({path}) is a directory")
        return find_model_dir(path), None
    if not path.exists():
        raise ModelFileError(path, "weights not found (expected a model directory or a public .hdf5 file)")
    if not options:
        if is_model_dir(path.parent):
            raise ValueError(f"'{weights_name}' ({path}) is a file of the spacy-elmo model directory {path.parent}: give the directory itself")
        if not _is_hdf5(path):
            checkpoint = " (a training checkpoint: give model-best/ or model-last/ beside it, or continue the training with --resume)"
            raise ModelFileError(
                path, "neither a model directory, a spaCy pipeline nor a public ELMo .hdf5 file" + (checkpoint if path.suffix == ".pt" else "")
            )
        raise ValueError(f"'{weights_name}' ({path}) is a public ELMo weight file: set '{options_name}' to its options.json")
    return path, Path(options)
