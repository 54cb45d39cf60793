"""`convert` (public weights -> spaCy pipeline), `assemble` (trained biLM -> spaCy pipeline)
and `export` (-> public weights)."""

import json
import re
from pathlib import Path

import typer
from spacy.language import Language

from ..io import find_model_dir, is_pipeline, load_model, load_public_model, save_public_model
from ..io.staging import Replaceable, staged_directory
from ..languages import blank_language
from ..nn.bilm import BiLM
from ..pipeline.component import elmo_component
from .app import app, clean_errors, parse_mix

# the pipeline options `convert` and `assemble` share
PIPELINE_DIR = typer.Argument(..., help="Where to write the spaCy pipeline")
LANG = typer.Option("en", help="Language of the pipeline's tokenizer (for a trained biLM: the corpus's)")


def package_name(value: str) -> str:
    """--name as `spacy package` will need it: the package is <lang>_<name>, a module name."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", value):
        raise typer.BadParameter(f"{value!r}: letters, digits and underscores only (the package is <lang>_<name>)")
    return value


def package_version(value: str) -> str:
    """--version as `spacy package` will need it: a PEP 440 version."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion as err:
        raise typer.BadParameter(f"{value!r} is not a version number (e.g. 0.1.0)") from err
    return value


NAME = typer.Option("elmo", help="Pipeline name (the package is <lang>_<name>)", callback=package_name)
VERSION = typer.Option("0.0.0", help="Pipeline version", callback=package_version)
MIX = typer.Option("average", help="Default mix: average, top or a layer index")
SENTENCIZER = typer.Option(True, help="Add a sentencizer so that sentences are embedded separately")


@app.command()
def convert(
    options: Path = typer.Argument(..., help="The public options.json"),
    weights: Path = typer.Argument(..., help="The public weights .hdf5"),
    output_dir: Path = PIPELINE_DIR,
    lang: str = LANG,
    name: str = NAME,
    version: str = VERSION,
    mix: str = MIX,
    sentencizer: bool = SENTENCIZER,
) -> None:
    """Turn a public ELMo model into a spaCy pipeline that `spacy.load`s and `spacy package`s."""
    with clean_errors():
        bilm = load_public_model(options, weights)
    save_pipeline(bilm, output_dir, lang, name, version, mix, sentencizer, f"ELMo vectors converted from {weights.name}")


@app.command()
def assemble(
    model: Path = typer.Argument(..., help="A trained model directory (e.g. training/model-best)"),
    output_dir: Path = PIPELINE_DIR,
    lang: str = LANG,
    name: str = NAME,
    version: str = VERSION,
    mix: str = MIX,
    sentencizer: bool = SENTENCIZER,
) -> None:
    """Build a spaCy pipeline with an `elmo` component holding a trained biLM."""
    with clean_errors():
        bilm = load_model(find_model_dir(model))
    save_pipeline(bilm, output_dir, lang, name, version, mix, sentencizer, f"ELMo vectors from a biLM pretrained with spacy-elmo ({model.name})")


def save_pipeline(bilm: BiLM, output_dir: Path, lang: str, name: str, version: str, mix: str, sentencizer: bool, description: str) -> None:
    """Write a blank `lang` pipeline (plus a sentencizer) whose `elmo` component holds `bilm`."""
    with clean_errors():
        nlp = blank_language(lang)
        if sentencizer:
            nlp.add_pipe("sentencizer")
        nlp.add_pipe("elmo", config={"mix": parse_mix(mix)})
        elmo_component(nlp).set_bilm(bilm)
        nlp.meta.update({"name": name, "version": version, "description": description})
        write_pipeline(nlp, output_dir)
    typer.echo(f"Saved pipeline {lang}_{name} with pipes {nlp.pipe_names} to {output_dir}")


def write_pipeline(nlp: Language, output_dir: Path) -> None:
    """`nlp.to_disk(output_dir)`, whole or not at all: written beside it, then swapped in
    (`staged_directory`). An existing `output_dir` must be empty or hold a saved pipeline
    and nothing else (it is replaced), and must not hold the working directory."""
    with staged_directory(output_dir, replaces=Replaceable(only_a_pipeline, "a saved spaCy pipeline and nothing else")) as staging:
        nlp.to_disk(staging)


def only_a_pipeline(path: Path) -> bool:
    """Whether `path` holds what `nlp.to_disk` writes and nothing else: config.cfg,
    meta.json, the tokenizer, the vocab and a file or folder per component of its meta."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not (is_pipeline(path) and isinstance(meta, dict)):
        return False
    written = {"config.cfg", "meta.json", "tokenizer", "vocab", *meta.get("components", []), *meta.get("disabled", [])}
    return all(entry.name in written or (entry.suffix == ".json" and entry.stem in written) for entry in path.iterdir())


@app.command()
def export(
    model: Path = typer.Argument(..., help="A spacy-elmo model directory or a pipeline with an elmo component"),
    output_dir: Path = typer.Argument(..., help="Where to write options.json and weights.hdf5"),
) -> None:
    """Write a model in the public hdf5 + options format that bilm-tf and AllenNLP read."""
    with clean_errors():
        bilm = load_model(find_model_dir(model))
        save_public_model(bilm, output_dir / "options.json", output_dir / "weights.hdf5")
    config = bilm.config
    if not config.use_skip_connections or config.lstm_dim == config.projection_dim:
        typer.echo(
            "Note: bilm-tf reads this model; AllenNLP's reader assumes skip connections and an LSTM projection.",
            err=True,
        )
    if bilm.config.warm_state:
        typer.echo("Note: the public format has no initial state; the warm state was not exported.", err=True)
    typer.echo(f"Wrote {output_dir / 'options.json'} and {output_dir / 'weights.hdf5'}")
