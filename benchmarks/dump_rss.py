"""Memory of `python -m spacy_elmo dump` as its input grows: the child's RSS over the run,
its peak, and tokens/s, for inputs of several sizes.

Run by hand (bounded memory shows as the same peak RSS at 10x and 100x the input):

    python benchmarks/dump_rss.py MODEL TEXT [--lines 10000,100000,1000000] [--options OPTIONS.json]
        [--layers top|all|average] [--forget-sentences] [--use-sentence-keys] [--threads 1]
        [--dump-args "--batch-tokens 8192"] [--interval 1] [--tmp DIR] [--csv samples.csv]

MODEL: anything `dump` loads (a public .hdf5 needs --options). TEXT: one whitespace-tokenized
sentence per line, cycled to each size's line count into a file in a temporary folder; each
line after the first pass gets its pass number as a last token, so that every line is distinct,
as in real text (`sentence_to_index` is keyed by sentence: repeats would not make it grow), and
with --use-sentence-keys, lines that cannot be HDF5 keys are skipped. Each size runs `dump` as
a child process whose VmRSS is read from /proc/PID/status every --interval seconds; the peak is
the kernel's (ru_maxrss of the reaped child), so no spike between samples is missed. The input
and the output are deleted before the next size. Without --forget-sentences, `sentence_to_index`
(the whole input's text, as in AllenNLP) grows with the input, by design; with
--use-sentence-keys, a 16-byte digest per line does.
"""

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, List, Optional, Sequence, Tuple

from spacy_elmo.cli.dump import usable_as_key

MIB = 1024 * 1024
MB = 1000 * 1000
QUARTERS = (0.25, 0.5, 0.75, 1.0)


@dataclass
class Run:
    """One `dump` of a generated input: its sizes, the RSS samples and what dump reported."""

    lines: int
    tokens: int
    input_bytes: int
    output_bytes: int = 0
    seconds: float = 0.0
    peak_mib: float = 0.0
    samples: List[Tuple[float, float]] = field(default_factory=list)
    """(seconds since the start, RSS MiB) every --interval seconds."""
    dump_tokens_per_second: Optional[float] = None
    """From dump's last line: tokens over the embedding loop's time (model loading and the
    input scan excluded); None if the line was not found."""

    def rss_at(self, fraction: float) -> float:
        """The last RSS sample taken at or before `fraction` of the run's wall time."""
        if not self.samples:
            return float("nan")
        moment = fraction * self.samples[-1][0]
        return [rss for seconds, rss in self.samples if seconds <= moment + 1e-9][-1]

    @property
    def tokens_per_second(self) -> float:
        return self.dump_tokens_per_second if self.dump_tokens_per_second is not None else self.tokens / self.seconds


def parse_sizes(text: str) -> List[int]:
    """Parse --lines: "10000,100000,1e6" -> [10000, 100000, 1000000]."""
    try:
        sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--lines wants comma-separated line counts, got {text!r}") from err
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--lines wants positive line counts, got {text!r}")
    return sizes


def source_lines(path: Path, use_sentence_keys: bool) -> List[str]:
    lines = [" ".join(line.split()) for line in path.open(encoding="utf-8", errors="replace")]
    lines = list(dict.fromkeys(line for line in lines if line and (usable_as_key(line) or not use_sentence_keys)))
    if not lines:
        raise SystemExit(f"{path} has no usable non-empty lines")
    return lines


def generated_lines(lines: Sequence[str], count: int) -> Iterator[str]:
    """`count` distinct lines cycling `lines` (distinct): each pass after the first is numbered."""
    for number in range(count):
        passes, index = divmod(number, len(lines))
        yield f"{lines[index]} {passes}" if passes else lines[index]


def write_input(lines: Sequence[str], count: int, path: Path) -> int:
    """Write the generated input; returns its token count."""
    tokens = 0
    with path.open("w", encoding="utf-8") as out:
        for line in generated_lines(lines, count):
            out.write(line + "\n")
            tokens += line.count(" ") + 1
    return tokens


def rss_mib(pid: int) -> Optional[float]:
    """The process's VmRSS, or None once it has exited (Linux: /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


def sample_child(process: "subprocess.Popen[bytes]", interval: float) -> Tuple[List[Tuple[float, float]], float, int, float]:
    """Sample the child's RSS until it exits; (samples, peak MiB, exit code, seconds). The
    child is reaped with wait4, whose ru_maxrss is its peak resident set."""
    start = time.perf_counter()
    samples: List[Tuple[float, float]] = []
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        seconds = time.perf_counter() - start
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return samples, usage.ru_maxrss / 1024, process.returncode, seconds
        rss = rss_mib(process.pid)
        if rss is not None:
            samples.append((seconds, rss))
        time.sleep(interval)


def dump_command(args: argparse.Namespace, input_path: Path, output_path: Path) -> List[str]:
    command = [sys.executable, "-m", "spacy_elmo", "dump", args.model, str(input_path), str(output_path), f"--{args.layers}"]
    command += ["--threads", str(args.threads)]
    if args.options:
        command += ["--options", str(args.options)]
    if args.forget_sentences:
        command.append("--forget-sentences")
    if args.use_sentence_keys:
        command.append("--use-sentence-keys")
    return command + shlex.split(args.dump_args)


def reported_tokens_per_second(stdout: str) -> Optional[float]:
    match = re.search(r"\(([\d.]+) tokens/s\)", stdout)
    return float(match.group(1)) if match else None


def tail(handle: IO[str], characters: int = 2000) -> str:
    handle.seek(0)
    return handle.read()[-characters:]


def run_size(args: argparse.Namespace, lines: Sequence[str], count: int) -> Run:
    """Generate `count` lines, dump them in a child, measure; the files are deleted after."""
    with tempfile.TemporaryDirectory(prefix="dump_rss-", dir=args.tmp) as folder:
        input_path, output_path = Path(folder) / "input.txt", Path(folder) / "output.hdf5"
        tokens = write_input(lines, count, input_path)
        run = Run(lines=count, tokens=tokens, input_bytes=input_path.stat().st_size)
        with tempfile.TemporaryFile("w+", dir=folder) as stdout, tempfile.TemporaryFile("w+", dir=folder) as stderr:
            process = subprocess.Popen(dump_command(args, input_path, output_path), stdout=stdout, stderr=stderr)
            run.samples, run.peak_mib, code, run.seconds = sample_child(process, args.interval)
            if code:
                raise SystemExit(f"dump of {count:,} lines exited with {code}:\n{tail(stderr)}")
            run.dump_tokens_per_second = reported_tokens_per_second(tail(stdout))
        run.output_bytes = output_path.stat().st_size
    return run


HEADER = (
    f"{'lines':>10} {'tokens':>11} {'input MB':>9} {'output MB':>10} {'peak MiB':>9} "
    + " ".join(f"{f'RSS@{int(q * 100)}%':>8}" for q in QUARTERS)
    + f" {'seconds':>8} {'tokens/s':>9}"
)


def table_row(run: Run) -> str:
    quarters = " ".join(f"{run.rss_at(q):>8.1f}" for q in QUARTERS)
    return (
        f"{run.lines:>10,} {run.tokens:>11,} {run.input_bytes / MB:>9.1f} {run.output_bytes / MB:>10.1f} {run.peak_mib:>9.1f} "
        f"{quarters} {run.seconds:>8.1f} {run.tokens_per_second:>9,.0f}"
    )


def write_samples(path: Path, runs: Sequence[Run]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(("lines", "seconds", "rss_mib"))
        writer.writerows((run.lines, round(seconds, 1), round(rss, 1)) for run in runs for seconds, rss in run.samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="What `dump` loads: model directory, pipeline, or public .hdf5 (with --options)")
    parser.add_argument("text", type=Path, help="One sentence per line, cycled to each size")
    parser.add_argument("--lines", type=parse_sizes, default=[10_000, 100_000, 1_000_000], help="Comma-separated input sizes, in lines")
    parser.add_argument("--options", type=Path, default=None, help="options.json, when MODEL is a public .hdf5")
    parser.add_argument("--layers", choices=("top", "all", "average"), default="top", help="dump's --top, --all or --average")
    parser.add_argument("--forget-sentences", action="store_true", help="Pass --forget-sentences (no sentence_to_index)")
    parser.add_argument("--use-sentence-keys", action="store_true", help="Pass --use-sentence-keys")
    parser.add_argument("--threads", type=int, default=1, help="dump's --threads")
    parser.add_argument("--dump-args", default="", help="More dump options, as one shell-quoted string")
    parser.add_argument("--interval", type=float, default=1.0, help="Seconds between RSS samples")
    parser.add_argument("--tmp", type=Path, default=None, help="Folder for the generated input and the output (default: the system's)")
    parser.add_argument("--csv", type=Path, default=None, help="Write every (lines, seconds, rss_mib) sample here")
    args = parser.parse_args()

    lines = source_lines(args.text, args.use_sentence_keys)
    print(" ".join(dump_command(args, Path("INPUT"), Path("OUTPUT"))[1:]), flush=True)
    print(HEADER, flush=True)
    runs = []
    for count in args.lines:
        runs.append(run_size(args, lines, count))
        print(table_row(runs[-1]), flush=True)
    if args.csv:
        write_samples(args.csv, runs)
    if len(runs) >= 2:
        first, last = runs[0], runs[-1]
        per_line = (last.peak_mib - first.peak_mib) * MIB / (last.lines - first.lines) if last.lines != first.lines else 0.0
        print(f"peak RSS from {first.lines:,} to {last.lines:,} lines: {last.peak_mib - first.peak_mib:+.1f} MiB ({per_line:+.1f} bytes per line)")


if __name__ == "__main__":
    main()
