"""Exact nearest-neighbour search of `neighbors` against the number of indexed tokens.

For each size, writes an index layer of synthetic unit vectors (float16, the real width)
and a token table as `neighbors` does, then times exact top-k queries with
`spacy_elmo.analysis.neighbors.top_k_cosine` over the memmap. Prints index bytes, write
time, query time (first and median, wall and CPU seconds) and the query process's peak RSS
(memmap pages count towards RSS, but are file-backed: the OS can drop them at any time;
RssAnon is the memory the search itself holds). Writing and searching run in separate
processes, so each peak RSS is its own. Run by hand:

    python benchmarks/neighbors_scaling.py [--sizes 100000 1000000 2400000 10000000] [--width 512]
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict

import numpy
import torch
from numpy.lib.format import open_memmap

from spacy_elmo.analysis.neighbors import CHUNK_ROWS, TOKENS, layer_file, top_k_cosine, unit_rows

WRITE_ROWS = 100_000


def write_index(folder: Path, n_tokens: int, width: int) -> Dict:
    """A layer of `n_tokens` random unit rows and an (n_tokens, 5) int32 token table."""
    rng = numpy.random.default_rng(0)
    start = time.perf_counter()
    vectors = open_memmap(folder / layer_file(1), "w+", numpy.float16, (n_tokens, width))
    tokens = open_memmap(folder / TOKENS, "w+", numpy.int32, (n_tokens, 5))
    for row in range(0, n_tokens, WRITE_ROWS):
        end = min(row + WRITE_ROWS, n_tokens)
        vectors[row:end] = unit_rows(rng.standard_normal((end - row, width), dtype=numpy.float32))
        tokens[row:end] = numpy.arange(row, end, dtype=numpy.int32)[:, None]
    vectors.flush()
    tokens.flush()
    return {"write_s": time.perf_counter() - start, "bytes": sum(path.stat().st_size for path in folder.iterdir())}


def query_index(folder: Path, n_queries: int, k: int, chunk_rows: int) -> Dict:
    """Time `n_queries` exact top-k searches over the layer in `folder`."""
    vectors = numpy.load(folder / layer_file(1), mmap_mode="r")
    rng = numpy.random.default_rng(1)
    walls, cpus = [], []
    for _ in range(n_queries):
        query = rng.standard_normal(vectors.shape[1]).astype(numpy.float32)
        wall, cpu = time.perf_counter(), time.process_time()
        top_k_cosine(vectors, query, k, chunk_rows)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {
        "first_s": walls[0],
        "median_s": statistics.median(walls[1:] or walls),
        "median_cpu_s": statistics.median(cpus[1:] or cpus),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_anon_mib": int(status.get("RssAnon", "0 kB").split()[0]) / 1024,
    }


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000, 2_400_000, 10_000_000])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--queries", type=int, default=6)
    parser.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS)
    parser.add_argument("--dir", type=Path, default=None, help="Where to write the synthetic index (default: the temp folder)")
    parser.add_argument("--write", nargs=2, metavar=("FOLDER", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--query", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        print(json.dumps(write_index(Path(args.write[0]), int(args.write[1]), args.width)))
        return
    if args.query:
        print(json.dumps(query_index(Path(args.query), args.queries, args.k, args.chunk_rows)))
        return
    print(f"{cpu_name()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"numpy {numpy.__version__}, torch {torch.__version__}")
    print(f"width {args.width}, float16 rows, top-{args.k}, chunks of {args.chunk_rows} rows, {args.queries} queries per size")
    columns = [
        ("tokens", 10),
        ("index MiB", 10),
        ("B/token", 8),
        ("write s", 8),
        ("first s", 8),
        ("median s", 9),
        ("cpu s", 7),
        ("peak RSS MiB", 13),
        ("RssAnon MiB", 12),
    ]
    print(" ".join(name.rjust(width) for name, width in columns))
    for n_tokens in args.sizes:
        folder = Path(tempfile.mkdtemp(prefix="neighbors-scaling-", dir=args.dir))
        try:
            common = ["--width", str(args.width), "--k", str(args.k), "--queries", str(args.queries), "--chunk-rows", str(args.chunk_rows)]
            written = run_child(["--write", str(folder), str(n_tokens), *common])
            timed = run_child(["--query", str(folder), *common])
        finally:
            shutil.rmtree(folder)
        values = [
            str(n_tokens),
            f"{written['bytes'] / 2**20:.0f}",
            f"{written['bytes'] / n_tokens:.0f}",
            f"{written['write_s']:.1f}",
            f"{timed['first_s']:.3f}",
            f"{timed['median_s']:.3f}",
            f"{timed['median_cpu_s']:.3f}",
            f"{timed['peak_rss_mib']:.0f}",
            f"{timed['rss_anon_mib']:.0f}",
        ]
        print(" ".join(value.rjust(width) for value, (_, width) in zip(values, columns)))


def run_child(arguments) -> Dict:
    """Run this script with `arguments` in a fresh process; its JSON answer."""
    result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
