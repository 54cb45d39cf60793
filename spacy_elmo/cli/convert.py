"""`convert` (public weights -> spaCy pipeline), `export` (-> public weights) and `warm`."""
from pathlib import Path
from typing import List, Optional, Union

import spacy
import typer

from ..io import find_model_dir, load_model, load_public_model, save_model, save_public_model
from ..nn.warm_state import with_warm_state
from .app import app


def parse_mix(mix: str) -> Union[str, int]:
    """"average", "top" or a layer index as typed on the command line."""
    return int(mix) if mix.lstrip("-").isdigit() else mix


@app.command()
def convert(
    options: Path = typer.Argument(..., help="The public options.json"),
    weights: Path = typer.Argument(..., help="The public weights .hdf5"),
    output_dir: Path = typer.Argument(..., help="Where to write the spaCy pipeline"),
    lang: str = typer.Option("en", help="Language of the pipeline's tokenizer"),
    name: str = typer.Option("elmo", help="Pipeline name (the package is <lang>_<name>)"),
    version: str = typer.Option("0.0.0", help="Pipeline version"),
    mix: str = typer.Option("average", help="Default mix: average, top or a layer index"),
    sentencizer: bool = typer.Option(True, help="Add a sentencizer so that sentences are embedded separately"),
) -> None:
    """Turn a public ELMo model into a spaCy pipeline that `spacy.load`s and `spacy package`s."""
    bilm = load_public_model(options, weights)
    nlp = spacy.blank(lang)
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"mix": parse_mix(mix)}).set_bilm(bilm)
    nlp.meta.update(
        {"name": name, "version": version, "description": f"ELMo vectors converted from {weights.name}"}
    )
    nlp.to_disk(output_dir)
    typer.echo(f"Saved pipeline {lang}_{name} with pipes {nlp.pipe_names} to {output_dir}")


@app.command()
def export(
    model: Path = typer.Argument(..., help="A spacy-elmo model directory or a pipeline with an elmo component"),
    output_dir: Path = typer.Argument(..., help="Where to write options.json and weights.hdf5"),
) -> None:
    """Write a model in the public hdf5 + options format that bilm-tf and AllenNLP read."""
    bilm = load_model(find_model_dir(model))
    output_dir.mkdir(parents=True, exist_ok=True)
    save_public_model(bilm, output_dir / "options.json", output_dir / "weights.hdf5")
    if bilm.config.warm_state:
        typer.echo("Note: the public format has no initial state; the warm state was not exported.", err=True)
    typer.echo(f"Wrote {output_dir / 'options.json'} and {output_dir / 'weights.hdf5'}")


@app.command()
def warm(
    model: Path = typer.Argument(..., help="A spacy-elmo model directory or a pipeline with an elmo component"),
    text: Path = typer.Argument(..., help="Warm-up text, one sentence per line"),
    output: Path = typer.Argument(..., help="Where to write the warmed model (same kind as MODEL)"),
    rows: int = typer.Option(16, help="Sentences run side by side; their final states are averaged"),
    max_sentences: int = typer.Option(2000, help="Use at most this many lines of TEXT"),
    lang: str = typer.Option("en", help="Tokenizer for TEXT when MODEL is a model directory"),
) -> None:
    """Store a fixed initial LSTM state computed from warm-up text (see README)."""
    pipeline = model if (model / "config.cfg").is_file() else None
    nlp = spacy.load(pipeline) if pipeline else spacy.blank(lang)
    sentences = read_warm_up(text, nlp, max_sentences)
    bilm = with_warm_state(load_model(find_model_dir(model)), sentences, rows=rows)
    if pipeline:
        nlp.get_pipe(find_model_dir(model).name).set_bilm(bilm)
        nlp.to_disk(output)
    else:
        save_model(bilm, output)
    typer.echo(f"Warmed on {len(sentences)} sentences; wrote {output}")


def read_warm_up(text: Path, nlp, max_sentences: int) -> List[List[str]]:
    """Non-empty lines of `text`, tokenized by `nlp`'s tokenizer, whitespace dropped."""
    sentences: List[List[str]] = []
    with text.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            tokens = [t.text for t in nlp.make_doc(line.strip()) if not t.is_space]
            if tokens:
                sentences.append(tokens)
            if len(sentences) == max_sentences:
                break
    if not sentences:
        raise typer.BadParameter(f"{text} holds no text")
    return sentences
