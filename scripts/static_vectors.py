"""Static word vectors trained on the text a biLM read, as a spaCy pipeline: the baseline's
own word vectors for the twins against a base with static vectors.

    python scripts/static_vectors.py OUTPUT_DIR corpus/train corpus/adapt/train --dim 300

Each TEXT is a file or a folder of `.txt` files with one tokenized sentence per line (what
`spacy_elmo corpus` writes), read in the order given. floret (`pip install
spacy-elmo[vectors]`) trains fastText skipgram vectors on them (subword n-grams while
training, one vector per word of `--min-count` or more uses in the table), and spaCy's
`init vectors` turns the table into a pipeline that `scripts/downstream.py train
--static-vectors OUTPUT_DIR` hands to both arms. One thread (the default) gives the same
vectors for the same text every time; more threads are faster and not reproducible.
"""

import json
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

import typer
from spacy.language import Language

app = typer.Typer(add_completion=False)
LINE_END = "</s>"
"""fastText's token for the end of a line: a row of its table that no spaCy token is."""
STATS_FILE = "static-vectors.json"


def written_here(path: Path) -> bool:
    """Whether `path` is a pipeline with vectors this script wrote (which a new run replaces)."""
    return (path / STATS_FILE).is_file() and (path / "vocab" / "vectors").is_file()


def text_files(paths: List[Path]) -> Iterator[Path]:
    """Each path itself, or a folder's `.txt` files in name order."""
    for path in paths:
        if path.is_dir():
            files = sorted(path.glob("*.txt"))
            if not files:
                raise typer.BadParameter(f"{path} holds no .txt files")
            yield from files
        elif path.is_file():
            yield path
        else:
            raise typer.BadParameter(f"{path} not found")


def without_line_ends(table: Path) -> None:
    """Take the row of `LINE_END` out of a .vec table (rows end in "\n" alone: a word may
    hold what `str.splitlines` would also break at, U+2028 say)."""
    header, *rows = table.read_text(encoding="utf-8").rstrip("\n").split("\n")
    kept = [row for row in rows if not row.startswith(f"{LINE_END} ")]
    count, width = header.split()
    table.write_text("\n".join([f"{int(count) - (len(rows) - len(kept))} {width}", *kept]) + "\n", encoding="utf-8")


def train_vectors(nlp: Language, files: List[Path], dim: int, epochs: int, min_count: int, window: int, threads: int) -> int:
    """floret skipgram vectors of the words of `files` into `nlp.vocab.vectors`; returns
    how many tokens the files hold."""
    import floret
    from spacy.training.initialize import convert_vectors

    with tempfile.TemporaryDirectory() as scratch:
        joined = Path(scratch) / "text.txt"
        tokens = 0
        with joined.open("w", encoding="utf-8") as out:
            for path in files:
                try:
                    for line in path.open(encoding="utf-8"):
                        tokens += len(line.split())
                        out.write(line.rstrip("\n") + "\n")
                except UnicodeDecodeError as err:
                    raise typer.BadParameter(
                        f"{path}: not UTF-8 text (byte {err.start} of a line: {err.reason}); `corpus` writes tokenized UTF-8 text"
                    ) from err
        if tokens == 0:
            raise typer.BadParameter(f"no tokens in {', '.join(map(str, files))}")
        try:
            model = floret.train_unsupervised(
                str(joined), model="skipgram", mode="fasttext", dim=dim, epoch=epochs, minCount=min_count, ws=window, thread=threads
            )
        except ValueError as err:  # floret's "Empty vocabulary"
            raise typer.BadParameter(f"no word of the text is used --min-count {min_count} times or more: lower it ({err})") from err
        table = Path(scratch) / "vectors.vec"
        model.save_vectors(str(table))
        without_line_ends(table)
        convert_vectors(nlp, table, truncate=0, prune=-1, mode="default", name=None)
    return tokens


@app.command()
def main(
    output_dir: Path = typer.Argument(..., help="The pipeline with vectors to write (config, vocab with its vectors)"),
    texts: List[Path] = typer.Argument(..., help="Files or folders of .txt files, one tokenized sentence per line"),
    dim: int = typer.Option(300, min=1, help="Width of the vectors"),
    epochs: int = typer.Option(10, min=1, help="Passes over the text"),
    min_count: int = typer.Option(2, min=1, help="Uses a word needs to get a vector"),
    window: int = typer.Option(5, min=1, help="Context window on each side"),
    threads: int = typer.Option(1, min=1, help="Training threads (one: the same vectors every time)"),
    lang: str = typer.Option("en", help="spaCy language of the pipeline"),
) -> None:
    """Train skipgram vectors on TEXTS and write them as a spaCy pipeline in OUTPUT_DIR."""
    try:
        import floret  # noqa: F401  (here only to name the extra when it is missing)
    except ImportError as err:
        raise typer.BadParameter("training static vectors needs floret: pip install 'spacy-elmo[vectors]'") from err
    from spacy_elmo.io.staging import Replaceable, staged_directory
    from spacy_elmo.languages import blank_language

    try:
        nlp = blank_language(lang)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    files = list(text_files(texts))
    start = time.perf_counter()
    try:  # the output is checked before training, and appears whole or not at all
        with staged_directory(output_dir, replaces=Replaceable(written_here, "a pipeline with vectors this script wrote")) as staging:
            tokens = train_vectors(nlp, files, dim, epochs, min_count, window, threads)
            stats = {
                "texts": [str(path) for path in files],
                "tokens": tokens,
                "words_with_vectors": len(nlp.vocab.vectors),
                "dim": dim,
                "epochs": epochs,
                "min_count": min_count,
                "window": window,
                "threads": threads,
                "seconds": round(time.perf_counter() - start, 1),
            }
            nlp.to_disk(staging)
            (staging / STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n")
    except ValueError as err:  # an output folder it may not replace
        raise typer.BadParameter(str(err)) from err
    typer.echo(f"{stats['words_with_vectors']:,} vectors of width {dim} from {tokens:,} tokens in {stats['seconds']} s: {output_dir}")


if __name__ == "__main__":
    app()
