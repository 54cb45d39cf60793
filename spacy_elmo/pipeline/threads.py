"""Torch threading that survives `nlp.pipe(n_process=...)`.

spaCy forks worker processes on Linux. PyTorch's CPU build uses GNU OpenMP, whose thread
pool does not survive `fork`: a child's first multi-threaded op hangs forever if the
parent had used the pool. So a component running in a forked copy of the process that
loaded this module runs torch single-threaded; nothing else is changed.
"""

import os

import torch

_LOADED_IN_PID = os.getpid()


def in_forked_child() -> bool:
    return os.getpid() != _LOADED_IN_PID


def apply_num_threads(num_threads: int) -> None:
    """Set torch's intra-op threads before a biLM call (0 leaves them alone)."""
    wanted = 1 if in_forked_child() else num_threads
    if wanted and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
