"""`python -m spacy_elmo`: command-line entry points."""

from pathlib import Path
from typing import Optional

import typer

from .app import app, clean_errors

PROJECT_MODEL = Path("training") / "model-best"
"""Where `spacy project run all` leaves its biLM, relative to the project folder."""

DEMO_PAIRS = [
    ("I sat by the bank of the river and watched the water.", "bank"),
    ("We walked along the grassy bank of the stream.", "bank"),
    ("She deposited her salary at the bank on Monday.", "bank"),
    ("The bank approved the loan for the new house.", "bank"),
]


@app.command()
def info(
    weights: Path = typer.Argument(..., help="Model directory, or a public ELMo .hdf5 file"),
    options: Optional[Path] = typer.Option(None, help="options.json for a public .hdf5 file"),
) -> None:
    """Print a model's configuration."""
    from ..io import load_bilm

    with clean_errors():
        bilm = load_bilm(str(weights), str(options) if options else None)
    for key, value in bilm.config.to_dict().items():
        typer.echo(f"{key:26} {value}")
    if bilm.words is not None:
        typer.echo(f"{'words':26} {len(bilm.words):,}")
    typer.echo(f"{'parameters':26} {sum(p.numel() for p in bilm.parameters()):,}")


@app.command()
def demo(
    weights: Optional[Path] = typer.Option(None, help=f"Model directory or public .hdf5 (default: {PROJECT_MODEL}, the project's biLM)"),
    options: Optional[Path] = typer.Option(None, help="options.json for a public .hdf5 file"),
) -> None:
    """Embed a few sentences and print contextual similarities of the word 'bank'."""
    from ..analysis.vectors import elmo_pipeline

    if weights is None:
        if not PROJECT_MODEL.is_dir():
            raise typer.BadParameter(
                f"no --weights given and no {PROJECT_MODEL} here: run `spacy project run all` first, "
                "or give --weights (a model directory, a pipeline, or a public .hdf5 with --options)"
            )
        weights = PROJECT_MODEL
        typer.echo(f"Using {PROJECT_MODEL.resolve()}.")
    with clean_errors():
        nlp = elmo_pipeline(weights, options)
    docs = list(nlp.pipe(text for text, _ in DEMO_PAIRS))
    first = docs[0]
    typer.echo(f"doc._.elmo.layers {first._.elmo.layers.shape}  doc._.elmo.mixed {first._.elmo.mixed.shape}")
    words = [next(t for t in doc if t.text == word) for doc, (_, word) in zip(docs, DEMO_PAIRS)]
    typer.echo("cosine of 'bank' across sentences (river, river, money, money):")
    for a in words:
        typer.echo("  " + "  ".join(f"{a.similarity(b):6.3f}" for b in words))
