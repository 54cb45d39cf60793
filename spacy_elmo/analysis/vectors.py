"""Docs and their ELMo vectors for the analyses, produced the way the `elmo` component does.

`elmo_pipeline` loads any model the component loads: a saved pipeline with an `elmo`
component (its components up to the elmo one, so its sentence boundaries and elmo settings
hold), or a model directory or a public .hdf5 file with its options.json (into a blank
English pipeline); `read_docs` reads a DocBin, CoNLL-U, .jsonl or text file; `embed` runs
the pipeline over docs with a progress bar, so every analysis sees exactly the vectors
`doc._.elmo` holds.
"""

from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from tqdm import tqdm

from ..io import ModelFileError, is_pipeline
from ..pipeline.component import DOCS_PER_PIPE_BATCH, elmo_component

PathLike = Union[str, Path]
ELMO = "elmo"
"""The elmo component's name in an analysis pipeline (`elmo_component`'s default)."""


def elmo_pipeline(model: PathLike, options: Optional[PathLike] = None, **settings: Any) -> Language:
    """A pipeline that ends with an `elmo` component for `model`, keeping all layers: a saved
    pipeline's components up to its elmo component (those after it are not loaded; the
    elmo component is named "elmo"), else a blank English one with only the component.

    settings: `elmo` component settings over the model's (e.g. mix="top", batch_tokens=8192)."""
    import spacy

    from ..io import load_bilm

    settings = {**settings, "keep_layers": True}
    if is_pipeline(model):
        if options:
            raise ValueError(f"--options is only used with a public .hdf5 file, but {model} is a spaCy pipeline")
        return _saved_pipeline_up_to_elmo(Path(model), settings)
    nlp = spacy.blank("en")
    config: Dict[str, Any] = {"weights": str(model), "options": str(options) if options else None, **settings}
    nlp.add_pipe(ELMO, config=config)
    elmo_component(nlp).set_bilm(load_bilm(model, options))  # fails here, with the file named, not on first doc
    return nlp


def _saved_pipeline_up_to_elmo(path: Path, settings: Dict[str, Any]) -> Language:
    import spacy
    from spacy.util import load_config

    from ..io import find_model_dir

    name = find_model_dir(path).name  # spaCy saves a component into a folder of its name
    names = list(load_config(path / "config.cfg")["nlp"]["pipeline"])
    if name not in names:
        raise ModelFileError(path, f"its elmo component's folder {name!r} is not in the pipeline {names}")
    overrides = {f"components.{name}.{key}": value for key, value in settings.items()}
    nlp = spacy.load(path, exclude=names[names.index(name) + 1 :], config=overrides)
    if name != ELMO:
        nlp.rename_pipe(name, ELMO)
    return nlp


def read_docs(path: PathLike, nlp: Language, limit: int = 0) -> List[Doc]:
    """`iter_docs` as a list; an error when there are none."""
    docs = list(iter_docs(path, nlp, limit))
    if not docs:
        raise ValueError(f"{path} holds no documents")
    return docs


def iter_docs(path: PathLike, nlp: Language, limit: int = 0) -> Iterator[Doc]:
    """The docs of a DocBin (.spacy), a CoNLL-U file (.conllu, one sentence per doc, as
    `spacy convert` makes them), a .jsonl file (each line's `text` field, read as the
    `corpus` command reads it) or a text file (one doc per non-empty line); text is
    tokenized by `nlp`'s tokenizer as it is read. At most `limit` docs when limit > 0."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    if path.suffix == ".spacy":
        docs: Iterable[Doc] = _read_as(path, "a DocBin", lambda: DocBin().from_disk(path).get_docs(nlp.vocab))
    elif path.suffix == ".conllu":
        from spacy.training.converters import conllu_to_docs

        docs = _read_as(path, "CoNLL-U", lambda: conllu_to_docs(path.read_text(encoding="utf-8"), n_sents=1, no_print=True))
    elif path.suffix == ".jsonl":
        from ..training.corpus import CorpusStats, read_documents

        docs = (nlp.make_doc(text) for text in read_documents(path, CorpusStats()))
    else:
        docs = (nlp.make_doc(line.strip()) for line in _lines(path) if line.strip())
    for number, doc in enumerate(docs):
        if limit and number == limit:
            return
        yield doc


def _read_as(path: Path, kind: str, read: Callable[[], Iterable[Doc]]) -> Iterator[Doc]:
    """The docs `read` gives; a ValueError naming `path` where spaCy cannot read it as `kind`
    (its own errors name neither the file nor, for CoNLL-U, the line)."""
    try:
        yield from read()
    except (ValueError, IndexError, KeyError) as err:
        raise ValueError(f"{path}: cannot be read as {kind} ({err})") from err


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        yield from lines


def check_keeps_layers(nlp: Language) -> None:
    """A ValueError unless `nlp`'s elmo component keeps every layer in doc._.elmo.layers."""
    if not elmo_component(nlp).settings.keep_layers:
        raise ValueError("the analyses read every layer: give the elmo component keep_layers = true (elmo_pipeline does)")


def embed(nlp: Language, docs: Iterable[Doc], total_tokens: Optional[int] = None, desc: str = "embed") -> Iterator[Doc]:
    """Run `nlp`'s components (an `elmo_pipeline`: those up to its elmo component) over
    `docs` (in order) with a tokens progress bar; each doc comes back with
    `doc._.elmo.layers` (L+1, n_tokens, 2P) and `.mixed` (n_tokens, 2P). A component that
    does not keep its layers is refused here, before any doc is read."""
    check_keeps_layers(nlp)
    return _embedded(nlp, docs, total_tokens, desc)


def _embedded(nlp: Language, docs: Iterable[Doc], total_tokens: Optional[int], desc: str) -> Iterator[Doc]:
    with tqdm(total=total_tokens, unit="tok", unit_scale=True, desc=desc) as bar:
        for doc in nlp.pipe(docs, batch_size=DOCS_PER_PIPE_BATCH):
            bar.update(len(doc))
            yield doc


def unit_rows(vectors: numpy.ndarray, dtype: type = numpy.float32) -> numpy.ndarray:
    """(n, width) -> (n, width) rows of unit L2 norm in `dtype` (zero rows stay zero)."""
    vectors = numpy.asarray(vectors, dtype=dtype)
    norms = numpy.linalg.norm(vectors, axis=-1, keepdims=True)
    return numpy.divide(vectors, norms, out=numpy.zeros_like(vectors), where=norms > 0)


def layer_names(n_output_layers: int) -> List[str]:
    """Display names of the biLM's output layers, then the component's mix."""
    return [f"layer {k}" for k in range(n_output_layers)] + ["mix"]
