"""The `elmo` pipeline component: runs the biLM over docs and stores `doc._.elmo`."""
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch
from spacy.vocab import Vocab

from ..io import ModelFileError, find_model_dir, load_model, load_public_model, model_from_bytes, model_to_bytes, save_model
from ..nn.bilm import BiLM
from ..nn.embedder import Embedder
from .config import ElmoSettings, LayerMix, MixSetting
from .extensions import DATA_ATTR, install_extensions
from .output import ElmoOutput
from .segments import Segment, doc_segments, token_budget_batches
from .similarity import set_similarity_hooks
from .threads import apply_num_threads

DEFAULT_CONFIG: Dict[str, Any] = {
    "weights": "",
    "options": None,
    "mix": "average",
    "keep_layers": True,
    "set_tensor": False,
    "similarity_hooks": True,
    "batch_tokens": 4096,
    "use_sentences": True,
    "window_size": 128,
    "window_overlap": 32,
    "device": "cpu",
    "num_threads": 0,
    "token_cache_size": 20000,
    "precision": "fp32",
}


@Language.factory("elmo", default_config=DEFAULT_CONFIG, assigns=["doc._.elmo_data", "doc.tensor"])
def make_elmo(
    nlp: Language,
    name: str,
    weights: str,
    options: Optional[str],
    mix: MixSetting,
    keep_layers: bool,
    set_tensor: bool,
    similarity_hooks: bool,
    batch_tokens: int,
    use_sentences: bool,
    window_size: int,
    window_overlap: int,
    device: str,
    num_threads: int,
    token_cache_size: int,
    precision: str,
) -> "ElmoComponent":
    """The `elmo` factory; the settings are described in the README."""
    settings = ElmoSettings(
        mix=mix,
        keep_layers=keep_layers,
        set_tensor=set_tensor,
        similarity_hooks=similarity_hooks,
        batch_tokens=batch_tokens,
        use_sentences=use_sentences,
        window_size=window_size,
        window_overlap=window_overlap,
        device=device,
        num_threads=num_threads,
        token_cache_size=token_cache_size,
        precision=precision,
    )
    return ElmoComponent(nlp.vocab, name, weights=weights, options=options, settings=settings)


def load_bilm(weights: Union[str, Path], options: Optional[Union[str, Path]] = None) -> BiLM:
    """A model directory, a saved pipeline with an elmo component, or a public hdf5 file
    with its options.json."""
    if not weights:
        raise ValueError(
            "the elmo component has no 'weights': give a spacy-elmo model directory, "
            "or a public ELMo .hdf5 file together with 'options' (its options.json)"
        )
    path = Path(weights)
    if path.is_dir():
        if options:
            raise ValueError(f"'options' is only used with a public .hdf5 file, but 'weights' ({path}) is a directory")
        return load_model(find_model_dir(path))
    if not path.exists():
        raise ModelFileError(path, "weights not found (expected a model directory or a public .hdf5 file)")
    if not options:
        raise ValueError(f"'weights' ({path}) is a public ELMo weight file: set 'options' to its options.json")
    return load_public_model(options, path)


class ElmoComponent(Pipe):
    """Sets `doc._.elmo` (and, if asked, similarity hooks and `doc.tensor`).

    The biLM is loaded on first use from `weights`/`options`, or from the pipeline's own
    directory by `from_disk`/`from_bytes`, so a saved pipeline does not need the original files.
    """

    def __init__(
        self,
        vocab: Vocab,
        name: str = "elmo",
        *,
        weights: str = "",
        options: Optional[str] = None,
        settings: ElmoSettings = ElmoSettings(),
    ) -> None:
        install_extensions()
        self.vocab = vocab
        self.name = name
        self.weights = weights
        self.options = options
        self.settings = settings
        self.device = torch.device(settings.device)
        self._bilm: Optional[BiLM] = None
        self._mix: Optional[LayerMix] = None
        self._embedder: Optional[Embedder] = None

    @property
    def bilm(self) -> BiLM:
        if self._bilm is None:
            self.set_bilm(load_bilm(self.weights, self.options))
        assert self._bilm is not None
        return self._bilm

    @property
    def mix(self) -> LayerMix:
        _ = self.bilm  # set_bilm sets the mix
        assert self._mix is not None
        return self._mix

    def set_bilm(self, bilm: BiLM) -> None:
        """Use `bilm` from now on (it is what `to_disk` then saves)."""
        self._mix = LayerMix.from_setting(self.settings.mix, bilm.n_output_layers)
        self._bilm = bilm.to(self.device).eval()
        self._embedder = Embedder(self._bilm, self.settings.token_cache_size, self.settings.precision)

    def initialize(self, get_examples: Optional[Callable] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the weights now rather than on the first doc."""
        _ = self.bilm

    def __call__(self, doc: Doc) -> Doc:
        self.annotate([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        error_handler = self.get_error_handler()
        for docs in minibatch(stream, size=batch_size):
            try:
                self.annotate(docs)
                yield from docs
            except Exception as err:
                error_handler(self.name, self, docs, err)

    def annotate(self, docs: List[Doc]) -> None:
        """Run the biLM over `docs` and store the results on them."""
        bilm = self.bilm  # loads the weights on first use
        apply_num_threads(self.settings.num_threads)
        width = bilm.config.output_dim
        leading = (bilm.n_output_layers,) if self.settings.keep_layers else ()
        stored = [numpy.zeros((*leading, len(doc), width), dtype=numpy.float32) for doc in docs]
        settings = self.settings
        segments = [
            segment
            for index, doc in enumerate(docs)
            for segment in doc_segments(doc, index, settings.use_sentences, settings.window_size, settings.window_overlap)
        ]
        for batch in token_budget_batches(segments, settings.batch_tokens):
            self._run_batch(docs, batch, stored)
        for doc, values in zip(docs, stored):
            self._store(doc, values)

    def _run_batch(self, docs: List[Doc], batch: List[Segment], stored: List[numpy.ndarray]) -> None:
        """Embed one batch of segments and write the kept rows into each doc's array."""
        sentences = [[docs[segment.doc_index][i].text for i in segment.token_indices] for segment in batch]
        assert self._embedder is not None
        layers = self._embedder(sentences).layers.cpu().numpy()  # (L + 1, batch, time, 2P) float32
        values = layers if self.settings.keep_layers else self._mixed(layers)
        for row, segment in enumerate(batch):
            keep = slice(segment.keep_start, segment.keep_end)
            stored[segment.doc_index][..., segment.token_indices[keep], :] = values[..., row, keep, :]

    def _mixed(self, layers: numpy.ndarray) -> numpy.ndarray:
        """(L + 1, ..., 2P) -> (..., 2P) with the configured mix."""
        mix = self.mix
        return (mix.gamma * numpy.tensordot(mix.weights, layers, axes=1)).astype(numpy.float32)

    def _store(self, doc: Doc, values: numpy.ndarray) -> None:
        """values: all layers (L + 1, n_tokens, 2P), or the mix (n_tokens, 2P) when layers are not kept."""
        if self.settings.keep_layers:
            output = ElmoOutput(mixed=self._mixed(values), layers=values)
        else:
            output = ElmoOutput(mixed=values)
        doc._.set(DATA_ATTR, output.to_dict())
        if self.settings.similarity_hooks:
            set_similarity_hooks(doc)
        if self.settings.set_tensor and doc.tensor.size == 0 and len(doc):
            doc.tensor = output.mixed

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        save_model(self.bilm, path)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self.set_bilm(load_model(path))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return model_to_bytes(self.bilm)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self.set_bilm(model_from_bytes(bytes_data, source=f"pipeline component {self.name!r}"))
        return self
