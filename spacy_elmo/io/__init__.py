"""Weight formats: the public ELMo hdf5 + options json, and the project's model directory."""

from .errors import ModelFileError
from .lm_head import load_lm_head, save_lm_head
from .locate import bilm_config, load_bilm, locate_bilm
from .model_dir import (
    find_model_dir,
    is_model_dir,
    is_pipeline,
    load_model,
    load_model_config,
    model_from_bytes,
    model_to_bytes,
    save_model,
    write_model_files,
)
from .options import read_options, write_options
from .public_hdf5 import load_public_model, load_public_weights, save_public_model, save_public_weights

__all__ = [
    "ModelFileError",
    "bilm_config",
    "find_model_dir",
    "is_model_dir",
    "is_pipeline",
    "load_bilm",
    "load_lm_head",
    "load_model",
    "load_model_config",
    "load_public_model",
    "load_public_weights",
    "locate_bilm",
    "model_from_bytes",
    "model_to_bytes",
    "read_options",
    "save_lm_head",
    "save_model",
    "save_public_model",
    "save_public_weights",
    "write_model_files",
    "write_options",
]
