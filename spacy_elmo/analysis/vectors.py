"""Docs and their ELMo vectors for the analyses, produced the way the `elmo` component does.

`elmo_pipeline` loads any model the component loads (a model directory, a saved pipeline
with an `elmo` component, or a public .hdf5 file with its options.json) into a blank
pipeline of the right language; `read_docs` reads a DocBin or a text file; `embed` runs
the component over docs with a progress bar, so every analysis sees exactly the vectors
`doc._.elmo` holds.
"""

from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

import numpy
import srsly
from spacy.language import Language
from spacy.tokens import Doc, DocBin
from tqdm import tqdm

from ..pipeline.component import elmo_component

PathLike = Union[str, Path]


def elmo_pipeline(model: PathLike, options: Optional[PathLike] = None, **settings: Any) -> Language:
    """A blank pipeline holding only an `elmo` component for `model`, keeping all layers.

    settings: `elmo` component settings (e.g. mix="top", batch_tokens=8192)."""
    import spacy

    from ..io import load_bilm

    nlp = spacy.blank(pipeline_language(model))
    config: Dict[str, Any] = {"weights": str(model), "options": str(options) if options else None}
    config.update(settings, keep_layers=True)
    nlp.add_pipe("elmo", config=config)
    elmo_component(nlp).set_bilm(load_bilm(model, options))  # fails here, with the file named, not on first doc
    return nlp


def pipeline_language(model: PathLike) -> str:
    """The language of a saved spaCy pipeline at `model`, else "en"."""
    meta = Path(model) / "meta.json"
    if Path(model).is_dir() and meta.is_file():
        return str(srsly.read_json(meta).get("lang", "en"))
    return "en"


def read_docs(path: PathLike, nlp: Language, limit: int = 0) -> List[Doc]:
    """`iter_docs` as a list; an error when there are none."""
    docs = list(iter_docs(path, nlp, limit))
    if not docs:
        raise ValueError(f"{path} holds no documents")
    return docs


def iter_docs(path: PathLike, nlp: Language, limit: int = 0) -> Iterator[Doc]:
    """The docs of a DocBin (.spacy), a CoNLL-U file (.conllu, one sentence per doc, as
    `spacy convert` makes them) or a text file (one doc per non-empty line, tokenized by
    `nlp`'s tokenizer, read as it goes); at most `limit` of them when limit > 0."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    if path.suffix == ".spacy":
        docs: Iterable[Doc] = DocBin().from_disk(path).get_docs(nlp.vocab)
    elif path.suffix == ".conllu":
        from spacy.training.converters import conllu_to_docs

        docs = conllu_to_docs(path.read_text(encoding="utf-8"), n_sents=1, no_print=True)
    else:
        docs = (nlp.make_doc(line.strip()) for line in _lines(path) if line.strip())
    for number, doc in enumerate(docs):
        if limit and number == limit:
            return
        yield doc


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        yield from lines


def check_keeps_layers(nlp: Language) -> None:
    """A ValueError unless `nlp`'s elmo component keeps every layer in doc._.elmo.layers."""
    if not elmo_component(nlp).settings.keep_layers:
        raise ValueError("the analyses read every layer: give the elmo component keep_layers = true (elmo_pipeline does)")


def embed(nlp: Language, docs: Iterable[Doc], total_tokens: Optional[int] = None, desc: str = "embed") -> Iterator[Doc]:
    """Run `nlp`'s elmo component over `docs` (in order) with a tokens progress bar; each
    doc comes back with `doc._.elmo.layers` (L+1, n_tokens, 2P) and `.mixed` (n_tokens, 2P).
    A component that does not keep its layers is refused here, before any doc is read."""
    check_keeps_layers(nlp)
    return _embedded(nlp, docs, total_tokens, desc)


def _embedded(nlp: Language, docs: Iterable[Doc], total_tokens: Optional[int], desc: str) -> Iterator[Doc]:
    elmo = elmo_component(nlp)
    with tqdm(total=total_tokens, unit="tok", unit_scale=True, desc=desc) as bar:
        for doc in elmo.pipe(docs):
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
