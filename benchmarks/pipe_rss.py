"""Memory over a long `nlp.pipe`: the resident set size every N docs, and tokens/s.

Run by hand (a leak shows as RSS that keeps growing after the first few thousand docs):

    python benchmarks/pipe_rss.py MODEL TEXT [--docs 100000] [--every 10000] [--threads 2]
        [--minutes 0] [--csv rss.csv]

MODEL: anything the `elmo` component loads. TEXT: one doc per line, cycled until `--docs`
docs (or `--minutes` of wall clock, for a soak) have been processed. Each doc's vectors are
read (the mixed vector of its first token) and then dropped, as a streaming user would.
"""

import argparse
import csv
import itertools
import time
from pathlib import Path
from typing import Iterator, List

import spacy


def rss_mib() -> float:
    """This process's current resident set size (Linux: /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmRSS in /proc/self/status: this benchmark reads Linux's /proc")


def cycled_lines(path: Path) -> Iterator[str]:
    lines: List[str] = [line.strip() for line in path.open(encoding="utf-8") if line.strip()]
    if not lines:
        raise SystemExit(f"{path} has no non-empty lines")
    return itertools.cycle(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("text", type=Path)
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=0.0, help="Run for this long instead of --docs docs (a soak)")
    parser.add_argument("--csv", type=Path, default=None, help="Write (docs, tokens, seconds, rss_mib) rows here")
    args = parser.parse_args()

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": args.model, "num_threads": args.threads})
    rows = []
    start = time.perf_counter()
    tokens = 0
    texts = cycled_lines(args.text)
    limit = None if args.minutes else args.docs
    print(f"{'docs':>9} {'tokens':>11} {'seconds':>9} {'tokens/s':>9} {'RSS MiB':>8}")
    for number, doc in enumerate(nlp.pipe(itertools.islice(texts, limit), batch_size=64), start=1):
        tokens += len(doc)
        if len(doc):
            float(doc[0]._.elmo[0])
        if number % args.every == 0:
            seconds = time.perf_counter() - start
            rss = rss_mib()
            rows.append((number, tokens, round(seconds, 1), round(rss, 1)))
            print(f"{number:>9,} {tokens:>11,} {seconds:>9.1f} {tokens / seconds:>9,.0f} {rss:>8.1f}", flush=True)
            if args.minutes and seconds >= 60 * args.minutes:
                break
    if args.csv:
        with args.csv.open("w", newline="") as out:
            csv.writer(out).writerows([("docs", "tokens", "seconds", "rss_mib"), *rows])
    if len(rows) >= 2:
        print(f"RSS growth from the first report to the last: {rows[-1][3] - rows[0][3]:+.1f} MiB")


if __name__ == "__main__":
    main()
