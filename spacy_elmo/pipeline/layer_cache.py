"""A bounded cache of per-sentence biLM layers, keyed by the sentence's token strings.

The biLM is frozen and deterministic, so a sentence seen before (the same training
sentence in the next epoch, the same dev sentence at the next evaluation) need not run
again. Entries live in memory up to a byte budget, least recently used first out; with a
spill folder, entries pushed out of memory go to an append-only file there (up to a
second budget) and are read back from it. Values come back exactly as they were stored.

A forked process (`nlp.pipe(n_process=...)`) keeps the memory part it inherited and starts
a spill file of its own; a pickled cache (spawned workers) arrives empty.
"""

import os
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Dict, Optional, Sequence, Tuple

import numpy

Words = Tuple[str, ...]
"""The token strings of a sentence (or of a window of one): the key."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    """Entries pushed out of memory (to the spill file when there is one)."""
    spilled_hits: int = 0
    """Hits served from the spill file."""


@dataclass(frozen=True)
class _Spilled:
    offset: int
    shape: Tuple[int, ...]


class LayerCache:
    """Token strings of a sentence -> its float32 layers (any shape), within byte budgets."""

    def __init__(self, max_bytes: int, spill_dir: Optional[Path] = None, max_spill_bytes: int = 0) -> None:
        """max_bytes: memory for values and keys; spill_dir with max_spill_bytes > 0: where
        entries pushed out of memory go (a temporary file, deleted when the cache is)."""
        if max_bytes < 0 or max_spill_bytes < 0:
            raise ValueError(f"cache budgets must not be negative, got {max_bytes} and {max_spill_bytes}")
        if max_spill_bytes and spill_dir is None:
            raise ValueError("a spill budget needs a spill folder")
        if max_spill_bytes and spill_dir is not None and not Path(spill_dir).is_dir():
            raise ValueError(f"{spill_dir}: the layer cache's spill folder does not exist")
        self.max_bytes = max_bytes
        self.max_spill_bytes = max_spill_bytes if spill_dir is not None else 0
        self.spill_dir = Path(spill_dir) if spill_dir is not None else None
        self.stats = CacheStats()
        self._memory: "OrderedDict[Words, numpy.ndarray]" = OrderedDict()
        self._memory_bytes = 0
        self._spilled: Dict[Words, _Spilled] = {}
        self._spill_file: Optional[BinaryIO] = None
        self._spill_bytes = 0
        self._spill_owner = os.getpid()

    def __getstate__(self) -> Dict[str, Any]:
        return {"max_bytes": self.max_bytes, "spill_dir": self.spill_dir, "max_spill_bytes": self.max_spill_bytes}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def memory_bytes(self) -> int:
        """Bytes held in memory: values plus keys."""
        return self._memory_bytes

    @property
    def spill_bytes(self) -> int:
        return self._spill_bytes

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def __contains__(self, key: Words) -> bool:
        self._own_spill_file()
        return key in self._memory or key in self._spilled

    def get(self, key: Words) -> Optional[numpy.ndarray]:
        """The stored array (read-only), or None."""
        value = self._memory.get(key)
        if value is not None:
            self._memory.move_to_end(key)
            self.stats.hits += 1
            return value
        self._own_spill_file()
        spilled = self._spilled.get(key)
        if spilled is not None:
            self.stats.hits += 1
            self.stats.spilled_hits += 1
            return self._read_spilled(spilled)
        self.stats.misses += 1
        return None

    def put(self, key: Words, value: numpy.ndarray) -> None:
        """Store a float32 copy of `value`; one that alone exceeds the memory budget goes to
        the spill file if there is room, else it is not kept."""
        if key in self:
            return
        size = entry_bytes(key, value)
        if size > self.max_bytes:
            self._spill(key, numpy.ascontiguousarray(value, dtype=numpy.float32))
            return
        while self._memory and self._memory_bytes + size > self.max_bytes:
            old_key, old_value = self._memory.popitem(last=False)
            self._memory_bytes -= entry_bytes(old_key, old_value)
            self.stats.evictions += 1
            self._spill(old_key, old_value)
        stored = numpy.array(value, dtype=numpy.float32, order="C", copy=True)
        stored.flags.writeable = False
        self._memory[key] = stored
        self._memory_bytes += size

    def clear(self) -> None:
        self._memory.clear()
        self._memory_bytes = 0
        self._forget_spilled()

    def _forget_spilled(self) -> None:
        self._spilled = {}
        self._spill_bytes = 0
        if self._spill_file is not None:
            self._spill_file.close()  # in a forked process, its own copy of the descriptor
        self._spill_file = None
        self._spill_owner = os.getpid()

    def _own_spill_file(self) -> None:
        """A forked process must not write to (or read through) its parent's file."""
        if self._spill_owner != os.getpid():
            self._forget_spilled()

    def _spill(self, key: Words, value: numpy.ndarray) -> None:
        """Append `value` to the spill file if the spill budget allows; else it is dropped."""
        self._own_spill_file()
        if not self.max_spill_bytes or self._spill_bytes + value.nbytes > self.max_spill_bytes:
            return
        if self._spill_file is None:
            self._spill_file = tempfile.TemporaryFile(dir=self.spill_dir, prefix="elmo-layers-")
        os.pwrite(self._spill_file.fileno(), value.tobytes(), self._spill_bytes)
        self._spilled[key] = _Spilled(self._spill_bytes, value.shape)
        self._spill_bytes += value.nbytes

    def _read_spilled(self, spilled: _Spilled) -> numpy.ndarray:
        assert self._spill_file is not None
        count = int(numpy.prod(spilled.shape))
        data = os.pread(self._spill_file.fileno(), count * 4, spilled.offset)
        return numpy.frombuffer(data, dtype=numpy.float32, count=count).reshape(spilled.shape)


def entry_bytes(key: Sequence[str], value: numpy.ndarray) -> int:
    """What an entry costs in memory: the float32 values, the key tuple and its strings."""
    return int(numpy.prod(value.shape)) * 4 + sys.getsizeof(key) + sum(sys.getsizeof(s) for s in key)
