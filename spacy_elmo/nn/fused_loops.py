"""The projected LSTM's training time loops as one compiled C++ function each.

In Python a time step of `_TrainingTimeLoop` is a dozen tensor operations, each a pass
over the step's gates with its own dispatch cost; `csrc/lstm_loops.cpp` runs the whole
loop in C++, each step one batched product and one fused pass of gate arithmetic (the
backward pass computes the gate derivatives on the fly from the record). PyTorch's C++
extension builder compiles it on first use for this machine's CPU (`-march=native`; the
build's name carries the CPU's feature flags and the torch version, so a home directory
shared by different CPUs keeps one build per CPU) and caches it (`TORCH_EXTENSIONS_DIR`,
by default ~/.cache/torch_extensions). Where the build is impossible (no C++ compiler, no
ninja) or `SPACY_ELMO_FUSED_LOOPS=0`, `fused_loops()` returns None and the Python loops
run: the same arithmetic, tested against each other.
"""

import functools
import hashlib
import logging
import os
import platform
import shutil
from pathlib import Path
from types import ModuleType
from typing import Optional

SOURCES = (Path(__file__).parent / "csrc" / "lstm_loops.cpp", Path(__file__).parent / "csrc" / "lstm_rows.h")
"""The extension's source and the header of its per-row arithmetic."""
FLAGS = ["-O3", "-march=native", "-fno-trapping-math", "-fno-math-errno", "-fopenmp"]
"""No -ffast-math: its reciprocal estimates turn the sigmoid's 1 / (1 + inf) into NaN.
-fno-trapping-math lets the compiler vectorize the loops with their clamps and floor;
-fopenmp makes ATen's parallel_for run the rows on torch's threads."""
DISABLE_VARIABLE = "SPACY_ELMO_FUSED_LOOPS"

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def fused_loops() -> Optional[ModuleType]:
    """The compiled loops (`record_loop`, `backward_loop`), built on first call; None where
    they are switched off or cannot be built (the reason is logged once)."""
    if os.environ.get(DISABLE_VARIABLE, "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        _put_ninja_on_path()
        return load(name=f"spacy_elmo_lstm_loops_{_build_key()}", sources=[str(SOURCES[0])], extra_cflags=FLAGS)
    except Exception as error:  # no compiler, no ninja, a failed build: the Python loops run
        logger.warning("the fused LSTM loops could not be built (%s: %s); training runs the Python loops", type(error).__name__, error)
        return None


def _put_ninja_on_path() -> None:
    """PyTorch's builder runs `ninja` from PATH, which lacks the ninja package's own where a
    virtual environment's Python runs without the environment activated: add it."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, os.environ.get("PATH", "")])


def _build_key() -> str:
    """A short hash of the sources, the flags, the torch version (whose headers the build
    uses) and the CPU's feature flags."""
    import torch

    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(torch.__version__.encode())
    digest.update(_cpu_features().encode())
    return digest.hexdigest()[:16]


def _cpu_features() -> str:
    """The CPU's feature flags (Linux: /proc/cpuinfo), else its description."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"
