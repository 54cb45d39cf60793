"""`report`: a one-page HTML report of a model; `plot ...`: its figures as PNGs."""

import contextlib
from pathlib import Path
from typing import Iterator, List, Optional

import typer

from ..io.staging import refuse_writing_over_inputs
from .app import app, clean_errors

plot_app = typer.Typer(help="Figures of a model as PNGs (needs matplotlib: the package's plots extra).", no_args_is_help=True)
app.add_typer(plot_app, name="plot")

OUTPUT_PNG = typer.Option(..., "--output", "-o", help="The PNG file to write")


@app.command()
def report(
    model: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, or public .hdf5 (with --options)"),
    output: Path = typer.Option(..., "--output", "-o", help="The HTML file to write"),
    corpus: Optional[Path] = typer.Option(None, help="Docs for sense maps: .spacy, .conllu, or text with one doc per line"),
    limit: int = typer.Option(300, min=0, help="Read at most this many docs of --corpus (0: all)"),
    probe: Optional[Path] = typer.Option(None, help="A probe report JSON from `probe --output` (default: a probe.json in or beside the model directory)"),
    metrics: Optional[Path] = typer.Option(None, help="The pretraining metrics.jsonl (default: one in or beside the model directory)"),
    evaluation: List[Path] = typer.Option([], help="A JSON written by `evaluate --output` (repeatable)"),
    word: List[str] = typer.Option([], help="A word to map (repeatable; default: the most ambiguous words of --corpus)"),
    n_words: int = typer.Option(3, min=1, help="How many ambiguous words to map when no --word is given"),
    layer: int = typer.Option(-1, help="The layer of the sense maps (negative counts from the top)"),
    clusters: int = typer.Option(2, min=1, help="k-means clusters in each sense map"),
    options: Optional[Path] = typer.Option(None, help="options.json when MODEL is a public .hdf5 file"),
) -> None:
    """Write a self-contained HTML page: model card, training curves, layer probes, sense
    maps and (for a pipeline) the layer weights its components learned."""
    from ..analysis.report import write_report

    with clean_errors():
        refuse_writing_over_inputs(output, (model, corpus, probe, metrics, *evaluation, options))
        written = write_report(
            model,
            output,
            options=options,
            metrics=metrics,
            corpus=corpus,
            limit=limit,
            probe=probe,
            evaluations=evaluation,
            words=word,
            n_words=n_words,
            layer=layer,
            clusters=clusters,
        )
    typer.echo(f"report -> {written}")


@plot_app.command("curves")
def plot_curves(
    metrics: List[Path] = typer.Argument(..., help="metrics.jsonl files of one or several pretraining runs"),
    output: Path = OUTPUT_PNG,
    label: List[str] = typer.Option([], help="A name for each run, in order (default: the run folders' names)"),
) -> None:
    """Training loss, dev perplexity, tokens/s and learning rate against tokens and time."""
    from ..analysis.plots import plot_training_curves

    with clean_errors(), missing_matplotlib():
        refuse_writing_over_inputs(output, metrics)
        typer.echo(f"training curves -> {plot_training_curves(metrics, output, label or None)}")


@plot_app.command("probes")
def plot_probes(
    report: Path = typer.Argument(..., help="A probe report JSON"),
    output: Path = OUTPUT_PNG,
) -> None:
    """Probe accuracy of each layer for each label, against the most-frequent-label baseline."""
    from ..analysis import plots

    with clean_errors(), missing_matplotlib():
        refuse_writing_over_inputs(output, (report,))
        typer.echo(f"probe accuracies -> {plots.plot_probes(report, output)}")


@plot_app.command("mix")
def plot_mix(
    pipeline: Path = typer.Argument(..., help="A saved spaCy pipeline with trained ELMo mixes"),
    output: Path = OUTPUT_PNG,
) -> None:
    """The layer weights softmax(s) and gamma each component's ELMo mix learned."""
    from ..analysis.plots import plot_mix_weights

    with clean_errors(), missing_matplotlib():
        refuse_writing_over_inputs(output, (pipeline,))
        typer.echo(f"mix weights -> {plot_mix_weights(pipeline, output)}")


@plot_app.command("senses")
def plot_senses(
    model: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, or public .hdf5 (with --options)"),
    corpus: Path = typer.Argument(..., help=".spacy, .conllu, or text with one doc per line"),
    word: str = typer.Option(..., help="The word to map (case-insensitive)"),
    output: Path = OUTPUT_PNG,
    layer: int = typer.Option(-1, help="The layer (negative counts from the top)"),
    clusters: int = typer.Option(2, min=1, help="k-means clusters to colour the uses by"),
    labels: Optional[Path] = typer.Option(None, help="Colour by these labels instead: a text file, one label per use of the word, in corpus order"),
    limit: int = typer.Option(0, min=0, help="Read at most this many docs (0: all; only docs holding the word are embedded)"),
    options: Optional[Path] = typer.Option(None, help="options.json when MODEL is a public .hdf5 file"),
) -> None:
    """The uses of a word on two PCA axes, coloured by cluster or label, with its
    context-free (layer 0) vector marked."""
    from ..analysis.plots import plot_sense_map
    from ..analysis.senses import collect_uses, sense_map
    from ..analysis.vectors import elmo_pipeline, iter_docs

    with clean_errors(), missing_matplotlib():
        refuse_writing_over_inputs(output, (model, corpus, labels, options))
        given = read_labels(labels) if labels else None
        nlp = elmo_pipeline(model, options)
        uses = collect_uses(nlp, iter_docs(corpus, nlp, limit), word, layer)
        written = plot_sense_map(sense_map(uses, clusters, given), output)
    typer.echo(f"{len(uses)} uses of '{word}' -> {written}")


def read_labels(path: Path) -> List[str]:
    """One label per non-empty line."""
    if not path.is_file():
        raise ValueError(f"{path}: labels file not found")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@contextlib.contextmanager
def missing_matplotlib() -> Iterator[None]:
    """Report a missing matplotlib as a one-line error, not a traceback."""
    from ..analysis.plots import MissingMatplotlib

    try:
        yield
    except MissingMatplotlib as err:
        raise typer.BadParameter(str(err)) from err
