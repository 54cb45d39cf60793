"""Tokenized sentences -> biLM layers, with token encodings cached by token string.

Words repeat: in running English text a few thousand types cover most tokens, so the
token encoder (the char-CNN and highways, or the word table) runs once per distinct string (per batch, and across batches while
the string stays in a bounded LRU cache). The cache assumes frozen weights: call `clear()`
after changing them. Calls from several threads are serialized.
"""

import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence

import numpy
import torch

from .bilm import BiLM, BiLMOutput, BiLMState
from .precision import check_precision, precision_context, runtime_bilm

FIRST_CACHE_ROWS = 4096
"""The token cache's first table size; it doubles as it fills, up to `cache_size` rows."""


class Embedder:
    """Runs a `BiLM` for inference over tokenized sentences."""

    def __init__(self, bilm: BiLM, cache_size: int = 20_000, precision: str = "fp32") -> None:
        """precision: "fp32" (exact), "bf16" or "int8" (approximate, see `precision`)."""
        if cache_size < 0:
            raise ValueError(f"cache_size must not be negative, got {cache_size}")
        self.device = bilm.device
        check_precision(precision, self.device)
        self.precision = precision
        self.source = bilm
        self.bilm = runtime_bilm(bilm, precision)
        self.cache_size = cache_size
        self._slots: "OrderedDict[str, int]" = OrderedDict()  # string -> row of _table, oldest first
        self._table: Optional[torch.Tensor] = None  # (up to cache_size, P): see _table_for
        self._boundaries: Optional[torch.Tensor] = None  # (2, P)
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget cached encodings and rebuild the runtime model from `source`'s weights."""
        self.bilm = runtime_bilm(self.source, self.precision)
        self._slots.clear()
        self._table = None
        self._boundaries = None

    def __getstate__(self) -> Dict[str, Any]:
        """What pickling sends (to spawned worker processes): the source model and the
        settings; the lock, the cache and the runtime model are rebuilt on arrival."""
        return {"source": self.source, "cache_size": self.cache_size, "precision": self.precision}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["source"], cache_size=state["cache_size"], precision=state["precision"])  # type: ignore[misc]

    @property
    def cached_tokens(self) -> int:
        return len(self._slots)

    def __call__(self, sentences: Sequence[Sequence[str]], state: Optional[BiLMState] = None) -> BiLMOutput:
        """sentences: each a non-empty list of tokens. Returns layers (L+1, batch, max_len, 2P)."""
        with self._lock, torch.no_grad(), precision_context(self.precision, self.device):
            types: Dict[str, int] = {}
            index = numpy.zeros((len(sentences), max((len(s) for s in sentences), default=0)), dtype=numpy.int64)
            for row, sentence in enumerate(sentences):
                for col, token in enumerate(sentence):
                    index[row, col] = types.setdefault(token, len(types))
            vectors = self.encode_types(list(types))
            tokens = vectors[torch.from_numpy(index).to(vectors.device)]
            if self._boundaries is None:
                self._boundaries = self.bilm.boundary_vectors()
            lengths = [len(s) for s in sentences]
            output = self.bilm.contextualize(tokens, lengths, state, boundaries=self._boundaries)
            return output._replace(layers=output.layers.float())

    def encode_types(self, strings: List[str]) -> torch.Tensor:
        """(len(strings), P) token encodings of distinct strings, from the cache where possible."""
        reference = self.bilm.token_encoder.embedding_weight
        out = reference.new_empty(len(strings), self.bilm.config.projection_dim)
        hits = [i for i, s in enumerate(strings) if s in self._slots]
        missing = [i for i, s in enumerate(strings) if s not in self._slots]
        if hits:
            slots = [self._slots[strings[i]] for i in hits]
            out[hits] = self._table_for(len(self._slots))[slots]
            for i in hits:
                self._slots.move_to_end(strings[i])
        if missing:
            ids = self.bilm.token_encoder.string_ids([strings[i] for i in missing])
            out[missing] = self.bilm.token_encoder(torch.from_numpy(ids).to(out.device)).to(out.dtype)
            self._remember([strings[i] for i in missing], out[missing])
        return out

    def _table_for(self, rows: int) -> torch.Tensor:
        """The cache's (rows at least, P) table of encodings, grown by doubling as distinct
        strings arrive (up to `cache_size` rows): a large cache_size costs memory only as it
        fills."""
        current = 0 if self._table is None else self._table.shape[0]
        if self._table is None or rows > current:
            reference = self.bilm.token_encoder.embedding_weight
            grown = reference.new_zeros(min(self.cache_size, max(rows, 2 * current, FIRST_CACHE_ROWS)), self.bilm.config.projection_dim)
            if self._table is not None:
                grown[:current] = self._table
            self._table = grown
        return self._table

    def _remember(self, strings: List[str], vectors: torch.Tensor) -> None:
        """Store `vectors` (len(strings), P), at most the newest `cache_size`, evicting the
        least recently used."""
        if not self.cache_size:
            return
        keep = range(max(0, len(strings) - self.cache_size), len(strings))
        table = self._table_for(min(self.cache_size, len(self._slots) + len(keep)))
        for k in keep:
            if len(self._slots) < self.cache_size:
                slot = len(self._slots)
            else:
                _, slot = self._slots.popitem(last=False)
            self._slots[strings[k]] = slot
            table[slot] = vectors[k]
