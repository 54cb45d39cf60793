"""Torch threading that survives `nlp.pipe(n_process=...)`.

spaCy forks worker processes on Linux. PyTorch's CPU build uses GNU OpenMP, whose thread
pool does not survive `fork`: a child's first multi-threaded op hangs forever if the
parent had used the pool. Forked children therefore run torch single-threaded.
"""
import os

import torch

_forked_child = False


def _after_fork_in_child() -> None:
    global _forked_child
    _forked_child = True
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def apply_num_threads(num_threads: int) -> None:
    """Set torch's intra-op threads (0 leaves them alone; ignored in forked children)."""
    if num_threads and not _forked_child and torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)
