"""heap: malloc keeps the large buffers a training step frees, so the next step does not
fault their pages in again (glibc only; elsewhere the calls are no-ops)."""

import os
import platform
import subprocess
import sys

import pytest

from spacy_elmo.heap import keep_freed_memory, release_freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

STEPS = """
import ctypes, resource, sys, torch
from spacy_elmo.heap import keep_freed_memory
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: count 4 KiB pages, whatever the system's huge-page policy
if sys.argv[1] == "keep":
    assert keep_freed_memory()

def step():  # large buffers alive at once, all freed at the end, as in a training step
    buffers = [torch.empty(int(size) << 20, dtype=torch.uint8).fill_(1) for size in sys.argv[2].split(",")]
    del buffers

for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


def page_faults_per_step(mode: str, mebibytes: str) -> float:
    # glibc's default threshold (128 KiB) pinned: by default it rises as mapped chunks are
    # freed, so whether a given step faults its pages in again depends on the heap's history.
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}
    result = subprocess.run([sys.executable, "-c", STEPS, mode, mebibytes], capture_output=True, text=True, check=True, env=env)
    return float(result.stdout.strip())


@pytest.mark.skipif(not GLIBC, reason="the malloc settings are glibc's")
@pytest.mark.parametrize(
    "mebibytes",
    [
        pytest.param("12,3,12,6,20", id="53 MiB in five buffers"),
        pytest.param("40", id="one buffer above the 32 MiB ceiling of glibc's mmap threshold"),
    ],
)
def test_kept_memory_spares_each_step_its_page_faults(mebibytes):
    """Large buffers a step, mapped afresh for every step by default (over 10,000 faults of
    4 KiB), served again from the heap with the settings, also one above the 32 MiB that
    glibc's mmap threshold can be raised to (a biLM layer's gate record is 34-37 MB)."""
    assert page_faults_per_step("default", mebibytes) > 10000
    assert page_faults_per_step("keep", mebibytes) < 100


def test_heap_calls_are_taken_by_glibc_and_harmless_elsewhere():
    taken = keep_freed_memory()
    release_freed_memory()
    assert taken == GLIBC
