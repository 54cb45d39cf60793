"""The `elmo` pipeline component: runs the biLM over docs and stores `doc._.elmo`."""
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

import numpy
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch

from ..io import ModelFileError, is_model_dir, load_model, load_public_model, model_from_bytes, model_to_bytes, save_model
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
    "device": "cpu",
    "num_threads": 0,
    "token_cache_size": 20000,
}


@Language.factory("elmo", default_config=DEFAULT_CONFIG)
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
    device: str,
    num_threads: int,
    token_cache_size: int,
) -> "ElmoComponent":
    settings = ElmoSettings(
        mix=mix,
        keep_layers=keep_layers,
        set_tensor=set_tensor,
        similarity_hooks=similarity_hooks,
        batch_tokens=batch_tokens,
        use_sentences=use_sentences,
        window_size=window_size,
        device=device,
        num_threads=num_threads,
        token_cache_size=token_cache_size,
    )
    return ElmoComponent(nlp.vocab, name, weights=weights, options=options, settings=settings)


def load_bilm(weights: Union[str, Path], options: Optional[Union[str, Path]] = None) -> BiLM:
    """A model directory, or a public hdf5 file with its options.json."""
    if not weights:
        raise ValueError(
            "the elmo component has no 'weights': give a spacy-elmo model directory, "
            "or a public ELMo .hdf5 file together with 'options' (its options.json)"
        )
    path = Path(weights)
    if path.is_dir() or is_model_dir(path):
        if options:
            raise ValueError(f"'options' is only used with a public .hdf5 file, but 'weights' ({path}) is a directory")
        return load_model(path)
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
        vocab,
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
            self._set_bilm(load_bilm(self.weights, self.options))
        assert self._bilm is not None
        return self._bilm

    @property
    def mix(self) -> LayerMix:
        if self._mix is None:
            self._mix = LayerMix.from_setting(self.settings.mix, self.bilm.n_output_layers)
        return self._mix

    def _set_bilm(self, bilm: BiLM) -> None:
        self._mix = LayerMix.from_setting(self.settings.mix, bilm.n_output_layers)
        self._bilm = bilm.to(self.device).eval()
        self._embedder = Embedder(self._bilm, self.settings.token_cache_size)

    def initialize(self, get_examples: Optional[Callable] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the weights now rather than on the first doc."""
        _ = self.bilm

    def __call__(self, doc: Doc) -> Doc:
        self.annotate([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            self.annotate(docs)
            yield from docs

    def annotate(self, docs: List[Doc]) -> None:
        """Run the biLM over `docs` and store the results on them."""
        bilm = self.bilm  # loads the weights on first use
        apply_num_threads(self.settings.num_threads)
        n_layers, width = bilm.n_output_layers, bilm.config.output_dim
        layers = [numpy.zeros((n_layers, len(doc), width), dtype=numpy.float32) for doc in docs]
        segments = [
            segment
            for index, doc in enumerate(docs)
            for segment in doc_segments(doc, index, self.settings.use_sentences, self.settings.window_size)
        ]
        for batch in token_budget_batches(segments, self.settings.batch_tokens):
            self._run_batch(docs, batch, layers)
        for doc, doc_layers in zip(docs, layers):
            self._store(doc, doc_layers)

    def _run_batch(self, docs: List[Doc], batch: List[Segment], layers: List[numpy.ndarray]) -> None:
        sentences = [[docs[segment.doc_index][i].text for i in segment.token_indices] for segment in batch]
        assert self._embedder is not None
        output = self._embedder(sentences)
        values = output.layers.float().cpu().numpy()
        for row, segment in enumerate(batch):
            layers[segment.doc_index][:, segment.token_indices] = values[:, row, : len(segment.token_indices)]

    def _store(self, doc: Doc, layers: numpy.ndarray) -> None:
        mix = self.mix
        mixed = (mix.gamma * numpy.tensordot(mix.weights, layers, axes=1)).astype(numpy.float32)
        output = ElmoOutput(mixed=mixed, layers=layers if self.settings.keep_layers else None)
        doc._.set(DATA_ATTR, output.to_dict())
        if self.settings.similarity_hooks:
            set_similarity_hooks(doc)
        if self.settings.set_tensor and doc.tensor.size == 0 and len(doc):
            doc.tensor = mixed

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        save_model(self.bilm, path)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self._set_bilm(load_model(path))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return model_to_bytes(self.bilm)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self._set_bilm(model_from_bytes(bytes_data, source=f"pipeline component {self.name!r}"))
        return self
