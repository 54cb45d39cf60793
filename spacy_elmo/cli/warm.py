"""`warm`: store a fixed initial LSTM state computed from warm-up text."""

from pathlib import Path
from typing import List

import spacy
import typer
from spacy.language import Language

from ..io import find_model_dir, is_pipeline, load_model, save_model
from ..languages import blank_language
from ..nn.warm_state import with_warm_state
from ..pipeline.component import elmo_component
from .app import app, clean_errors
from .convert import write_pipeline


@app.command()
def warm(
    model: Path = typer.Argument(..., help="A spacy-elmo model directory or a pipeline with an elmo component"),
    text: Path = typer.Argument(..., help="Warm-up text, one sentence per line"),
    output: Path = typer.Argument(..., help="Where to write the warmed model (same kind as MODEL)"),
    rows: int = typer.Option(16, min=1, help="Contiguous runs of text read side by side; their final states are averaged"),
    max_sentences: int = typer.Option(2000, min=1, help="Use at most this many lines of TEXT"),
    lang: str = typer.Option("en", help="Tokenizer for TEXT when MODEL is a model directory"),
) -> None:
    """Store a fixed initial LSTM state computed from warm-up text (see README)."""
    with clean_errors():
        pipeline = model if is_pipeline(model) else None
        nlp = spacy.load(pipeline) if pipeline else blank_language(lang)
        sentences = read_warm_up(text, nlp, max_sentences)
        bilm = with_warm_state(load_model(find_model_dir(model)), sentences, rows=rows)
        if pipeline:
            elmo_component(nlp, find_model_dir(model).name).set_bilm(bilm)
            write_pipeline(nlp, output)
        else:
            save_model(bilm, output)
    typer.echo(f"Warmed on {len(sentences)} sentences; wrote {output}")


def read_warm_up(text: Path, nlp: Language, max_sentences: int) -> List[List[str]]:
    """Up to `max_sentences` non-empty lines of `text`, tokenized by `nlp`, whitespace dropped."""
    sentences: List[List[str]] = []
    with text.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            tokens = [t.text for t in nlp.make_doc(line.strip()) if not t.is_space]
            if tokens:
                sentences.append(tokens)
            if len(sentences) >= max_sentences:
                break
    if not sentences:
        raise ValueError(f"{text} holds no text")
    return sentences
