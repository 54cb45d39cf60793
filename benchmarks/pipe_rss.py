"""Memory over a long `nlp.pipe`: the resident set size every N docs, and tokens/s.

Run by hand (a leak shows as RSS that keeps growing after the first few thousand docs):

    python benchmarks/pipe_rss.py MODEL TEXT [--docs 100000] [--every 10000] [--threads 2]
        [--minutes 0] [--csv rss.csv] [--plot rss.png]
    python benchmarks/pipe_rss.py --from-csv rss.csv --plot rss.png [--title TITLE]

MODEL: anything the `elmo` component loads. TEXT: one doc per line, cycled until `--docs`
docs (or `--minutes` of wall clock, for a soak) have been processed. Each doc's vectors are
read (the mixed vector of its first token) and then dropped, as a streaming user would.
`--plot` draws RSS against docs processed (y axis from 0, so flat looks flat) with matplotlib
(the `plots` extra); `--from-csv` skips the run and plots an earlier `--csv` file.
"""

import argparse
import csv
import itertools
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

Row = Tuple[int, int, float, float]
"""(docs, tokens, seconds, rss_mib), as in the --csv file."""


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


def read_rows(path: Path) -> List[Row]:
    """The rows of a --csv file."""
    with path.open(newline="") as source:
        rows = [(int(row["docs"]), int(row["tokens"]), float(row["seconds"]), float(row["rss_mib"])) for row in csv.DictReader(source)]
    if not rows:
        raise SystemExit(f"{path} has no rows")
    return rows


def empty_figure() -> Any:
    """An empty figure; exits with the `plots` extra's message if matplotlib is missing."""
    from spacy_elmo.analysis.plots import MissingMatplotlib, new_figure

    try:
        return new_figure(7, 3.5)
    except MissingMatplotlib as err:
        raise SystemExit(str(err)) from err


def plot_rows(rows: Sequence[Row], output: Path, title: Optional[str] = None) -> Path:
    """RSS (MiB) against docs processed, the y axis from 0; written as a PNG at `output`."""
    from matplotlib.ticker import FuncFormatter

    from spacy_elmo.analysis.plots import save_png

    figure = empty_figure()

    docs = [row[0] for row in rows]
    rss = [row[3] for row in rows]
    ax = figure.subplots()
    ax.plot(docs, rss, marker="o", markersize=4)
    ax.set_ylim(0, max(rss) * 1.15)
    ax.set_xlim(0, max(docs) * 1.02)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_xlabel("docs processed")
    ax.set_ylabel("RSS (MiB)")
    tokens, seconds = rows[-1][1], rows[-1][2]
    subtitle = f"{docs[-1]:,} docs, {tokens / 1e6:.2f}M tokens in {seconds / 60:.0f} min; RSS {min(rss):.1f}-{max(rss):.1f} MiB"
    ax.set_title(f"{title}\n{subtitle}" if title else subtitle, fontsize=10)
    ax.grid(alpha=0.3)
    return save_png(figure, output)


def run(args: argparse.Namespace) -> List[Row]:
    """Process the docs, printing (and returning) a row every --every docs."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": args.model, "num_threads": args.threads})
    rows: List[Row] = []
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
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="Needed unless --from-csv")
    parser.add_argument("text", type=Path, nargs="?", help="Needed unless --from-csv")
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=0.0, help="Run for this long instead of --docs docs (a soak)")
    parser.add_argument("--csv", type=Path, default=None, help="Write (docs, tokens, seconds, rss_mib) rows here")
    parser.add_argument("--plot", type=Path, default=None, help="Draw RSS against docs as a PNG here (needs matplotlib: the plots extra)")
    parser.add_argument("--from-csv", type=Path, default=None, help="Do not run: read the rows of an earlier --csv (for --plot)")
    parser.add_argument("--title", default=None, help="The plot's title")
    args = parser.parse_args()
    if args.from_csv is None and (args.model is None or args.text is None):
        parser.error("MODEL and TEXT are needed unless --from-csv is given")
    if args.from_csv is not None and args.plot is None:
        parser.error("--from-csv only plots: give --plot PNG")
    if args.plot is not None:
        if not args.plot.parent.is_dir():
            parser.error(f"{args.plot.parent}: output directory not found")
        empty_figure()  # before a long run, not after it

    if args.from_csv is not None:
        plot_rows(read_rows(args.from_csv), args.plot, args.title)
        print(f"wrote {args.plot}")
        return
    rows = run(args)
    if args.csv:
        with args.csv.open("w", newline="") as out:
            csv.writer(out).writerows([("docs", "tokens", "seconds", "rss_mib"), *rows])
    if len(rows) >= 2:
        print(f"RSS growth from the first report to the last: {rows[-1][3] - rows[0][3]:+.1f} MiB")
    if args.plot and rows:
        plot_rows(rows, args.plot, args.title)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
