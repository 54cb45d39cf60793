"""The C library's heap: what PyTorch's CPU tensors are allocated from.

glibc's malloc serves a request above its mmap threshold with fresh pages from the kernel
and hands them back on free. A training step allocates and frees the same large buffers
(gate sigmoids, cells, gradients: megabytes each, some over 32 MiB) every time, so without
tuning every step pays a page fault per 4 KiB of them again. `keep_freed_memory` serves
such buffers from the heap, whatever their size, and keeps freed memory there for the
next step; `release_freed_memory` hands it back when a long job wants its resident set
small. Both are no-ops where the C library lacks the call (not glibc).
"""

import ctypes
import functools
from typing import Callable, Optional

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_MAX = -4
MMAP_MAX = 0
"""How many chunks may be mapped at once: none, so that every request comes from the heap
(raising the mmap threshold instead stops at glibc's ceiling of 32 MiB, and a biLM
layer's gate record of a 2,048-token batch is 34-37 MB)."""
TRIM_THRESHOLD = 2**30
"""Free memory at the heap's top kept for reuse before any is handed back."""
TOP_PAD = 64 * 2**20
"""Extra memory taken from the kernel at each growth of the heap."""


def keep_freed_memory() -> bool:
    """Tune malloc for a loop of large, repeated allocations (a training run): buffers of
    any size from the heap, freed memory kept for reuse. The settings hold for the whole
    process from then on, and its resident set stays at its peak. Returns whether the C
    library took all of them."""
    mallopt = _c_function("mallopt")
    if mallopt is None:
        return False
    settings = ((M_MMAP_MAX, MMAP_MAX), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD))
    taken = [mallopt(option, value) == 1 for option, value in settings]
    return all(taken)


def release_freed_memory() -> None:
    """Give the memory freed since the last call back to the OS (glibc keeps some of it
    otherwise, and over millions of small allocations the resident set creeps up)."""
    trim = _c_function("malloc_trim")
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=None)
def _c_function(name: str) -> Optional[Callable[..., int]]:
    """A function of the C library, looked up once among the process's own symbols."""
    try:
        library = ctypes.CDLL(None)
    except (OSError, TypeError):  # no process-wide symbol table (Windows)
        return None
    return getattr(library, name, None)
