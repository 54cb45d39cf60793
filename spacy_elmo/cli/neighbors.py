"""`neighbors`: the nearest uses of a word in context over a corpus, next to the nearest
words of the context-free layer 0 (the paper's Table 4)."""

from pathlib import Path
from typing import Any, Dict, List, Optional

import srsly
import typer

from ..analysis.neighbors import (
    NeighborIndex,
    Query,
    Use,
    WordMatch,
    default_index_dir,
    embed_query,
    marked_sentence,
    nearest_uses,
    nearest_words,
    open_index,
    resolve_layer,
)
from ..analysis.vectors import elmo_pipeline
from ..io.staging import refuse_writing_over_inputs, write_text_atomically
from ..pipeline.component import elmo_component
from .app import app, clean_errors

CONTEXT_CHARS = 60
"""Characters shown either side of a matched word in the table (the JSON has whole sentences)."""


@app.command()
def neighbors(
    model: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, or public .hdf5 (with --options)"),
    corpus: Path = typer.Argument(..., help="Text file (a doc per line), DocBin .spacy or .conllu to search"),
    word: str = typer.Option(..., "--word", help="The query word: a token of --sentence"),
    sentence: str = typer.Option(..., "--sentence", help="The query sentence, in which --word is found by its text"),
    occurrence: int = typer.Option(1, help="Which use of --word in --sentence (1: the first)"),
    layer: int = typer.Option(-1, help="Contextual layer to search, 1..L; negative counts from the top (-1: top)"),
    top: int = typer.Option(10, "-k", "--top", help="How many uses and words to show"),
    index: Optional[Path] = typer.Option(None, help="Index folder (default: $XDG_CACHE_HOME/spacy_elmo/neighbors/CORPUS-KEY, ~/.cache without XDG_CACHE_HOME)"),
    options: Optional[Path] = typer.Option(None, help="options.json when MODEL is a public .hdf5 file"),
    limit: int = typer.Option(0, help="Index at most this many docs of CORPUS (0: all)"),
    batch_tokens: int = typer.Option(4096, help="Token budget per biLM batch while indexing"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results to this JSON file"),
) -> None:
    """For --word in --sentence, show the nearest uses of any word in CORPUS by cosine on a
    contextual layer, each in its sentence, and the nearest distinct words of layer 0.

    The corpus index is built on first use and reused while model, corpus and --limit stay the same."""
    minimums = (("--top", top, 1), ("--occurrence", occurrence, 1), ("--limit", limit, 0), ("--batch-tokens", batch_tokens, 1))
    for name, value, least in minimums:
        if value < least:
            raise typer.BadParameter(f"{name} must be at least {least}, not {value}")
    with clean_errors():
        if json_path is not None:
            refuse_writing_over_inputs(json_path, (model, corpus, options))
        nlp = elmo_pipeline(model, options, batch_tokens=batch_tokens, similarity_hooks=False)
        layer = resolve_layer(layer, elmo_component(nlp).bilm.n_output_layers)
        query = embed_query(nlp, sentence, word, occurrence)
        folder = index or default_index_dir(model, options, corpus, limit)
        corpus_index = open_index(nlp, model, corpus, folder, layer, options=options, limit=limit, log=typer.echo)
        uses = nearest_uses(corpus_index, layer, query.layers[layer], top)
        words = nearest_words(corpus_index, query.layers[0], word, top)
    typer.echo(f"\nquery: {marked_sentence(query.sentence, query.start, query.end)}\n")
    typer.echo(f"layer {layer}: nearest uses in context")
    use_rows = [[f"{use.cosine:.3f}", use.word, use.marked(CONTEXT_CHARS)] for use in uses]
    typer.echo(_table(["cosine", "word", "sentence"], use_rows))
    typer.echo("\nlayer 0 (context-free): nearest words")
    word_rows = [[f"{match.cosine:.3f}", match.word, str(match.uses)] for match in words]
    typer.echo(_table(["cosine", "word", "uses"], word_rows))
    if json_path is not None:
        with clean_errors():
            write_text_atomically(json_path, srsly.json_dumps(_results(query, layer, corpus_index, uses, words), indent=2) + "\n")
        typer.echo(f"\n-> {json_path}")


def _table(header: List[str], rows: List[List[str]]) -> str:
    """Left-aligned columns under `header`, a rank first; the last column is not padded."""
    lines = [["#", *header]] + [[str(rank), *row] for rank, row in enumerate(rows, start=1)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    padded = [[*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]] for line in lines]
    return "\n".join("  " + "  ".join(line) for line in padded)


def _results(query: Query, layer: int, corpus_index: NeighborIndex, uses: List[Use], words: List[WordMatch]) -> Dict[str, Any]:
    """The query and both columns as JSON-ready data."""
    return {
        "query": {"word": query.word, "sentence": query.sentence, "position": query.position, "layer": layer},
        "index": str(corpus_index.path),
        "uses": [
            {
                "cosine": use.cosine,
                "word": use.word,
                "doc": use.doc,
                "position": use.position,
                "sentence": use.sentence,
                "marked": use.marked(),
            }
            for use in uses
        ],
        "words": [{"cosine": match.cosine, "word": match.word, "uses": match.uses} for match in words],
    }
