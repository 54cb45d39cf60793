"""The language-model softmax kept beside a trained biLM (`softmax.npz` in its model
directory), so the model can be evaluated exactly later. Read with `allow_pickle=False`."""

import io
from pathlib import Path
from typing import Tuple, Union

import numpy
import torch

from .errors import ModelFileError
from .model_dir import read_arrays

HEAD_FILE = "softmax.npz"


def save_lm_head(weight: torch.Tensor, bias: torch.Tensor, model_dir: Union[str, Path]) -> None:
    """weight (vocab, P) and bias (vocab,) into `model_dir/softmax.npz`."""
    buffer = io.BytesIO()
    numpy.savez(buffer, weight=weight.detach().float().cpu().numpy(), bias=bias.detach().float().cpu().numpy())
    (Path(model_dir) / HEAD_FILE).write_bytes(buffer.getvalue())


def load_lm_head(model_dir: Union[str, Path]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight (vocab, P), bias (vocab,)) from `model_dir/softmax.npz`."""
    path = Path(model_dir) / HEAD_FILE
    if not path.is_file():
        raise ModelFileError(path, "no language-model softmax here (only pretraining output directories have one)")
    arrays = read_arrays(path.read_bytes(), path)
    if sorted(arrays) != ["bias", "weight"]:
        raise ModelFileError(path, f"expected the arrays ['bias', 'weight'], found {sorted(arrays)}")
    weight, bias = arrays["weight"], arrays["bias"]
    if weight.ndim != 2 or bias.shape != (weight.shape[0],) or weight.dtype.kind != "f" or bias.dtype.kind != "f":
        raise ModelFileError(path, f"expected float weight (vocab, P) and bias (vocab,), got {weight.shape} and {bias.shape}")
    return torch.from_numpy(weight.astype(numpy.float32)), torch.from_numpy(bias.astype(numpy.float32))
