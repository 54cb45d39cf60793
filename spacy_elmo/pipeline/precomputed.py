"""Layers computed ahead of time (by `dump --all`), read in place of the biLM's for the
sentences they hold: a cross-fitted adaptation's training layers, say (see README).

A file is looked up by a sentence's tokens joined with single spaces, the key `dump`
writes in its `sentence_to_index` dataset (or, written with `--use-sentence-keys`, the
name of the sentence's dataset). A stored sentence whose token count differs from the
sentence looked up (a token holding whitespace) counts as absent.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy

from .layer_cache import Words

INDEX_DATASET = "sentence_to_index"
"""The dataset of `dump`'s files that maps sentence text to the name of its dataset."""


class PrecomputedLayers:
    """Sentences' (n_layers, n_tokens, width) float32 layers read from `dump --all` files;
    the first file that holds a sentence gives it."""

    def __init__(self, paths: Sequence[str], n_layers: int, width: int) -> None:
        """n_layers, width: the biLM's, which every stored sentence must match."""
        import h5py

        self.shape = (n_layers, width)
        self._files: List[Any] = []
        self._indexes: List[Optional[Dict[str, str]]] = []
        for path in paths:
            if not Path(path).is_file():
                raise ValueError(f"precomputed layers: {path} not found")
            try:
                handle = h5py.File(path, "r")
            except OSError as err:
                raise ValueError(f"precomputed layers: {path} is not an hdf5 file ({err})") from err
            try:
                self._check_first_sentence(str(path), handle)
            except ValueError:
                handle.close()
                raise
            self._files.append(handle)
            self._indexes.append(json.loads(handle[INDEX_DATASET][0]) if INDEX_DATASET in handle else None)

    def _check_first_sentence(self, path: str, handle: Any) -> None:
        """Refuse a file of mixed or top-only layers, or one written by another biLM shape."""
        for name in handle:
            if name == INDEX_DATASET:
                continue
            stored = handle[name].shape
            if len(stored) != 3 or (stored[0], stored[2]) != self.shape:
                raise ValueError(
                    f"precomputed layers: {path} holds arrays of shape {tuple(stored)}, but the biLM gives {self.shape[0]} layers "
                    f"of width {self.shape[1]}: write it with `dump --all` and the same biLM architecture"
                )
            return
        raise ValueError(f"precomputed layers: {path} holds no sentences")

    def get(self, words: Words) -> Optional[numpy.ndarray]:
        """(n_layers, len(words), width) float32, or None where no file holds the sentence."""
        key = " ".join(words)
        for handle, index in zip(self._files, self._indexes):
            name = index.get(key) if index is not None else (key if usable_as_key(key) and key in handle else None)
            if name is None:
                continue
            values = numpy.asarray(handle[name][()], dtype=numpy.float32)
            if values.shape[1] == len(words):
                return values
        return None

    def close(self) -> None:
        for handle in self._files:
            handle.close()
        self._files, self._indexes = [], []


def usable_as_key(sentence: str) -> bool:
    """Whether `sentence` can name an HDF5 dataset, as `dump --use-sentence-keys` needs:
    no '/', no NUL, not a lone '.'."""
    return "/" not in sentence and "\x00" not in sentence and sentence != "."
