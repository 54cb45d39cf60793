"""`dump`: one sentence per line in, the `allennlp elmo` hdf5 layout out."""

import hashlib
import json
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple, cast

import numpy
import typer
from tqdm import tqdm

from ..batching import token_budget_batches
from ..heap import release_freed_memory
from ..io import load_bilm
from ..io.staging import refuse_writing_over_inputs, staged_file
from ..nn.embedder import Embedder
from ..nn.precision import Precision
from ..pipeline.config import ElmoSettings
from ..pipeline.precomputed import usable_as_key
from ..pipeline.threads import apply_num_threads
from .app import app, clean_errors

LINES_PER_CHUNK = 4096


@app.command()
def dump(
    model: Path = typer.Argument(..., help="Model directory, spaCy pipeline with elmo, or public .hdf5 (with --options)"),
    input_file: Path = typer.Argument(..., help="Text, one whitespace-tokenized sentence per line"),
    output_file: Path = typer.Argument(..., help="The hdf5 file to write"),
    all_layers: bool = typer.Option(False, "--all", help="Every layer: (n_layers + 1, n_tokens, 2P) per sentence"),
    top: bool = typer.Option(False, "--top", help="The top layer: (n_tokens, 2P)"),
    average: bool = typer.Option(False, "--average", help="The mean of all layers: (n_tokens, 2P)"),
    options: Optional[Path] = typer.Option(None, help="options.json when MODEL is a public .hdf5 file"),
    use_sentence_keys: bool = typer.Option(False, help="Key datasets by sentence text instead of line index"),
    forget_sentences: bool = typer.Option(False, help="Do not write sentence_to_index (it holds the whole input's text in memory)"),
    batch_tokens: int = typer.Option(4096, help="Token budget per biLM batch"),
    cache_size: int = typer.Option(50_000, help="Token encodings kept in the LRU cache"),
    precision: str = typer.Option("fp32", help="fp32 (exact), bf16 or int8"),
    device: str = typer.Option("cpu", help="torch device"),
    threads: int = typer.Option(0, help="torch threads (0: torch's default)"),
) -> None:
    """Embed a file as `allennlp elmo` does: a dataset per line (key "0", "1", ...) and a
    `sentence_to_index` JSON string dataset. Embeddings are written as they are computed."""
    if sum((all_layers, top, average)) != 1:
        raise typer.BadParameter("give exactly one of --all, --top, --average")
    with clean_errors():
        settings = ElmoSettings(
            batch_tokens=batch_tokens,
            window_size=1,
            window_overlap=0,
            device=device,
            num_threads=threads,
            token_cache_size=cache_size,
            precision=cast(Precision, precision),
        )
        if not output_file.parent.is_dir():
            raise ValueError(f"{output_file.parent}: output directory not found")
        refuse_writing_over_inputs(output_file, (model, input_file, options))
        n_lines, n_tokens = scan_input(input_file, use_sentence_keys)
        apply_num_threads(threads)
        bilm = load_bilm(str(model), str(options) if options else None).to(settings.torch_device)
    embedder = Embedder(bilm, cache_size=cache_size, precision=precision)
    import h5py

    sentence_to_index = {}
    start = time.perf_counter()
    # HDF5 1.8's group format: the default (1.6) root group's index keeps ~130 bytes a
    # dataset in memory, which grows without bound over a large input
    with clean_errors(), staged_file(output_file) as staging:
        with h5py.File(staging, "w", libver=("v108", "v108")) as out, tqdm(total=n_tokens, unit="tok", desc="dump", unit_scale=True) as bar:
            for chunk in read_chunks(input_file):
                for batch in token_budget_batches(chunk, batch_tokens, length=lambda line: len(line[2])):
                    layers = embedder([tokens for _, _, tokens in batch]).layers.cpu().numpy()
                    for row, (index, line, tokens) in enumerate(batch):
                        values = select_layers(layers[:, row, : len(tokens)], all_layers, top)
                        out.create_dataset(line if use_sentence_keys else str(index), data=values)
                        if not (use_sentence_keys or forget_sentences):
                            sentence_to_index[line] = str(index)
                    bar.update(sum(len(tokens) for _, _, tokens in batch))
                release_freed_memory()
            if not (use_sentence_keys or forget_sentences):
                dataset = out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                dataset[0] = json.dumps(sentence_to_index)
    elapsed = time.perf_counter() - start
    typer.echo(f"{n_lines} sentences, {n_tokens} tokens in {elapsed:.1f} s ({n_tokens / elapsed:.0f} tokens/s) -> {output_file}")


def scan_input(path: Path, use_sentence_keys: bool) -> Tuple[int, int]:
    """(lines, tokens) of the input; errors on an empty line, or a key HDF5 cannot hold."""
    if not path.is_file():
        raise ValueError(f"{path}: input file not found")
    n_lines = n_tokens = 0
    seen = set()  # 16-byte digests of the sentences, for --use-sentence-keys
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            sentence = line.strip()
            if not sentence:
                raise ValueError(f"{path} line {number} is empty; every line must hold a sentence")
            if use_sentence_keys:
                if not usable_as_key(sentence):
                    raise ValueError(f"{path} line {number} cannot be an HDF5 key ('/', NUL or a lone '.'): drop --use-sentence-keys")
                digest = hashlib.blake2b(sentence.encode("utf-8"), digest_size=16).digest()
                if digest in seen:
                    raise ValueError(f"{path} line {number} repeats an earlier sentence: drop --use-sentence-keys to keep both")
                seen.add(digest)
            n_lines += 1
            n_tokens += len(sentence.split())
    if not n_lines:
        raise ValueError(f"{path} is empty")
    return n_lines, n_tokens


Line = Tuple[int, str, List[str]]


def read_chunks(path: Path) -> Iterator[List[Line]]:
    """(line index, sentence, tokens) in chunks of LINES_PER_CHUNK lines. A failed read is
    a ValueError naming `path` (the dump's OSErrors are the output's, see `staged_file`)."""
    chunk: List[Line] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for index, line in enumerate(lines):
                sentence = line.strip()
                chunk.append((index, sentence, sentence.split()))
                if len(chunk) == LINES_PER_CHUNK:
                    yield chunk
                    chunk = []
    except OSError as err:
        raise ValueError(f"{path}: could not be read ({err.strerror or err})") from err
    if chunk:
        yield chunk


def select_layers(layers: numpy.ndarray, all_layers: bool, top: bool) -> numpy.ndarray:
    """(n_layers + 1, n_tokens, 2P) -> what the flag asks for."""
    if all_layers:
        return layers
    return layers[-1] if top else layers.mean(axis=0)
