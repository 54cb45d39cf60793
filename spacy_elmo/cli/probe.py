"""`probe`: per-layer linear probes of a biLM on labelled docs (UD part of speech, tags, ...)."""

import json
from pathlib import Path
from typing import Optional

import typer

from ..io.staging import refuse_writing_over_inputs, write_text_atomically
from .app import app, clean_errors, parse_mix


@app.command()
def probe(
    model: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, or public .hdf5 (with --options)"),
    data: Path = typer.Argument(..., help="Labelled docs: a DocBin (.spacy) or CoNLL-U (.conllu) file, e.g. UD English EWT train"),
    eval_data: Optional[Path] = typer.Option(None, "--eval", help="Held-out docs (default: a seeded split of DATA)"),
    labels: str = typer.Option("tag,pos,morph,dep", help="Comma-separated: tag, pos, morph, dep"),
    eval_fraction: float = typer.Option(0.2, help="Share of DATA's docs held out when --eval is not given"),
    seed: int = typer.Option(0, help="Seed of the held-out split"),
    limit: int = typer.Option(0, min=0, help="Use at most this many docs of DATA (0: all)"),
    eval_limit: int = typer.Option(0, min=0, help="Use at most this many docs of --eval (0: all)"),
    mix: str = typer.Option("average", help="The component's mix probed as 'mix': average, top or a layer index"),
    l2: float = typer.Option(1e-4, min=0.0, help="L2 penalty on the probe weights"),
    max_iter: int = typer.Option(100, min=1, help="L-BFGS iterations per probe"),
    options: Optional[Path] = typer.Option(None, help="options.json when MODEL is a public .hdf5 file"),
    output: Optional[Path] = typer.Option(None, help="Write the results as JSON here"),
) -> None:
    """Train a linear probe on every biLM layer and the mix for each label, score it on
    held-out docs next to the most-frequent-label-per-word baseline, and print the table."""
    from ..analysis.probe import check_labels, collect_features, run_probes, split_docs
    from ..analysis.vectors import elmo_pipeline, read_docs

    with clean_errors():
        if output is not None:
            refuse_writing_over_inputs(output, (model, data, eval_data, options))
        names = check_labels(name.strip() for name in labels.split(",") if name.strip())
        mix_setting = parse_mix(mix)
        nlp = elmo_pipeline(model, options, mix=mix_setting)
        docs = read_docs(data, nlp, limit)
        if eval_data is None:
            train_docs, eval_docs = split_docs(docs, eval_fraction, seed)
        else:
            train_docs, eval_docs = docs, read_docs(eval_data, nlp, eval_limit)
        train = collect_features(nlp, train_docs, names, desc="embed train")
        held_out = collect_features(nlp, eval_docs, names, desc="embed eval")
    report = run_probes(train, held_out, names, l2=l2, max_iter=max_iter)
    if not report.labels:
        raise typer.BadParameter(f"{data} carries none of the labels {names}")
    typer.echo(report.table())
    if output is not None:
        record = {
            "model": str(model),
            "data": str(data),
            "eval": str(eval_data) if eval_data else None,
            "eval_fraction": None if eval_data else eval_fraction,
            "seed": seed,
            "mix": mix_setting,
            "l2": l2,
            "max_iter": max_iter,
            **report.to_dict(),
        }
        with clean_errors():
            write_text_atomically(output, json.dumps(record, indent=2) + "\n")
        typer.echo(f"-> {output}")
