"""The `elmo` pipeline component: runs the biLM over docs and stores `doc._.elmo`."""

import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch
from spacy.vocab import Vocab
from thinc.api import Model

from ..batching import token_budget_batches
from ..io import (
    bilm_config,
    load_bilm,
    load_model,
    model_from_bytes,
    model_to_bytes,
    write_model_files,
)
from ..nn.bilm import BiLM
from ..nn.embedder import Embedder
from ..nn.precision import Precision
from .architectures import has_trained, note_weights_problem, reads_elmo, set_mix_dims
from .config import ElmoSettings, LayerCacheMode, LayerMix, MixSetting
from .extensions import DATA_ATTR, install_extensions
from .layer_cache import LayerCache, Words
from .output import ElmoOutput, token_offsets
from .precomputed import PrecomputedLayers
from .segments import Segment, doc_segments
from .similarity import set_similarity_hooks
from .threads import apply_num_threads

DEFAULT_CONFIG: Dict[str, Any] = {"weights": "", "options": None, **dataclasses.asdict(ElmoSettings())}
"""The factory's defaults: the weights' location, then `ElmoSettings`' defaults (their one definition)."""
DOCS_PER_PIPE_BATCH = 128
"""Docs `ElmoComponent.pipe` annotates at a time (the biLM then batches their segments by tokens)."""


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
    precision: Precision,
    layer_cache: LayerCacheMode,
    layer_cache_bytes: int,
    layer_cache_spill_bytes: int,
    layer_cache_dir: Optional[str],
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
        layer_cache=layer_cache,
        layer_cache_bytes=layer_cache_bytes,
        layer_cache_spill_bytes=layer_cache_spill_bytes,
        layer_cache_dir=layer_cache_dir,
    )
    return ElmoComponent(nlp.vocab, name, weights=weights, options=options, settings=settings)


class ElmoComponent(Pipe):
    """Sets `doc._.elmo` (and, if asked, similarity hooks and `doc.tensor`).

    The biLM is loaded on first use from `weights`/`options`, or from the pipeline's own
    directory by `from_disk`/`from_bytes`, so a saved pipeline does not need the original files.

    Downstream ELMo mixes (`spacy-elmo.ElmoScalarMix.*`) read `doc._.elmo`. spaCy's
    listener protocol (`find_listeners`, called whenever it links the pipeline) lets this
    component find them and give them the model's layer count and width.
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
        self.device = settings.torch_device
        self.model: Model = Model("elmo-annotations", _no_forward)
        """A stand-in for spaCy's listener protocol (the biLM is not a thinc model)."""
        self._mixes: Dict[str, List[Model]] = {}
        self._bilm: Optional[BiLM] = None
        self._mix: Optional[LayerMix] = None
        self._embedder: Optional[Embedder] = None
        self._layer_cache: Optional[LayerCache] = None
        self._precomputed: Optional[PrecomputedLayers] = None

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
        if self._layer_cache is not None:
            self._layer_cache.clear()
        for component, mixes in self._mixes.items():
            for mix in mixes:
                self._give_shape(mix, component)

    @property
    def active_cache(self) -> Optional[LayerCache]:
        """The per-sentence layer cache, when the `layer_cache` setting has it on now."""
        mode = self.settings.layer_cache
        trained = any(has_trained(mix) for mixes in self._mixes.values() for mix in mixes)
        if mode == "never" or (mode == "training" and not trained):
            return None
        if self._layer_cache is None:
            settings = self.settings
            spill_dir = Path(settings.layer_cache_dir or tempfile.gettempdir()) if settings.layer_cache_spill_bytes else None
            self._layer_cache = LayerCache(settings.layer_cache_bytes, spill_dir, settings.layer_cache_spill_bytes)
        return self._layer_cache

    @property
    def mixes(self) -> Dict[str, List[Model]]:
        """Component name -> the layers of its model that read this component's layers (the
        ELMo mixes and `ElmoLayers`)."""
        return self._mixes

    # spaCy's ListenedToComponent protocol: spaCy empties `listener_map`, then calls
    # `find_listeners` with every later component whenever it links the pipeline. That is
    # how this component finds the ELMo mixes. The mixes read doc._.elmo; they are not
    # proxies of this component's output, so to spaCy it has no listeners to replace
    # (`nlp.replace_listeners`, `replace_listeners` when sourcing a component).

    @property
    def listener_map(self) -> Dict[str, List[Model]]:
        return {}

    @listener_map.setter
    def listener_map(self, value: Dict[str, List[Model]]) -> None:
        """spaCy links the pipeline again: forget the mixes found so far."""
        self._mixes = {}

    @property
    def listeners(self) -> List[Model]:
        return []

    @property
    def listening_components(self) -> List[str]:
        return []

    def add_listener(self, listener: Model, component_name: str) -> None:
        """Register an ELMo mix of `component_name` and give it the model's shape if known."""
        mixes = self._mixes.setdefault(component_name, [])
        if listener not in mixes:
            mixes.append(listener)
        self._give_shape(listener, component_name)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        mixes = self._mixes.get(component_name, [])
        if listener not in mixes:
            return False
        mixes.remove(listener)
        if not mixes:
            del self._mixes[component_name]
        return True

    def find_listeners(self, component: Any) -> None:
        """Register every ELMo mix in `component`'s model."""
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if reads_elmo(node):
                    self.add_listener(node, component.name)

    def _give_shape(self, listener: Model, component_name: str) -> None:
        """Give `listener` the biLM's layer shape, if its weights can be read; a pipeline being
        loaded gets its mixes' shapes from its own files, and a mix that finds none says why."""
        try:
            config = self._bilm.config if self._bilm is not None else bilm_config(self.weights, self.options)
        except (ValueError, OSError) as err:  # ModelFileError included
            note_weights_problem(listener, f"component {self.name!r} cannot read its weights: {err}")
            return
        set_mix_dims(listener, config.n_output_layers, config.output_dim, where=f"component {component_name!r}")

    def initialize(self, get_examples: Optional[Callable] = None, *, nlp: Optional[Language] = None) -> None:
        """Load the weights now rather than on the first doc."""
        _ = self.bilm

    def use_precomputed_layers(self, paths: Sequence[str]) -> None:
        """From now on in this process, the sentences the `dump --all` files at `paths` hold
        take their layers from the files (the first that holds one) in place of the biLM's;
        no paths: none. The files are not saved with the component."""
        bilm = self.bilm
        if self._precomputed is not None:
            self._precomputed.close()
        self._precomputed = PrecomputedLayers(paths, bilm.n_output_layers, bilm.config.output_dim) if paths else None

    def __call__(self, doc: Doc) -> Doc:
        self.annotate([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = DOCS_PER_PIPE_BATCH) -> Iterator[Doc]:
        error_handler = self.get_error_handler()
        for docs in minibatch(stream, size=batch_size):
            try:
                self.annotate(docs)
                yield from docs
            except Exception as err:
                error_handler(self.name, self, docs, err)

    def annotate(self, docs: List[Doc]) -> None:
        """Run the biLM over `docs` (segments found in the precomputed layers or the
        layer cache excepted) and store the results on them."""
        bilm = self.bilm  # loads the weights on first use
        apply_num_threads(self.settings.num_threads)
        width = bilm.config.output_dim
        leading = (bilm.n_output_layers,) if self.settings.keep_layers else ()
        stored = [numpy.zeros((*leading, len(doc), width), dtype=numpy.float32) for doc in docs]
        settings = self.settings
        cache = self.active_cache
        to_embed: List[Tuple[Segment, Words]] = []
        for index, doc in enumerate(docs):
            for segment in doc_segments(doc, index, settings.use_sentences, settings.window_size, settings.window_overlap):
                words = tuple(doc[i].text for i in segment.token_indices)
                known = self._stored_layers(words)
                if known is None and cache is not None:
                    known = cache.get(words)
                if known is None:
                    to_embed.append((segment, words))
                else:
                    _write_segment(stored, segment, known)
        for batch in token_budget_batches(to_embed, settings.batch_tokens, length=lambda item: len(item[1])):
            values = self._embed([words for _, words in batch])
            for row, (segment, words) in enumerate(batch):
                segment_values = values[..., row, : len(words), :]
                if cache is not None:
                    cache.put(words, segment_values)
                _write_segment(stored, segment, segment_values)
        for doc, values in zip(docs, stored):
            self._store(doc, values)

    def _stored_layers(self, words: Words) -> Optional[numpy.ndarray]:
        """The sentence's precomputed layers (mixed when layers are not kept), if there are."""
        layers = self._precomputed.get(words) if self._precomputed is not None else None
        return None if layers is None else self._as_kept(layers)

    def _embed(self, sentences: List[Words]) -> numpy.ndarray:
        """(L + 1, batch, time, 2P) float32 layers, or (batch, time, 2P) mixed when layers are not kept."""
        assert self._embedder is not None
        return self._as_kept(self._embedder(sentences).layers.cpu().numpy())

    def _as_kept(self, layers: numpy.ndarray) -> numpy.ndarray:
        """(L + 1, ..., 2P) layers as the component keeps them: as they are, or mixed to
        (..., 2P) when layers are not kept."""
        return layers if self.settings.keep_layers else self.mix.apply(layers)

    def _store(self, doc: Doc, values: numpy.ndarray) -> None:
        """values: all layers (L + 1, n_tokens, 2P), or the mix (n_tokens, 2P) when layers are not kept."""
        offsets = token_offsets(doc)
        if self.settings.keep_layers:
            output = ElmoOutput(mixed=self.mix.apply(values), layers=values, offsets=offsets)
        else:
            output = ElmoOutput(mixed=values, offsets=offsets)
        doc._.set(DATA_ATTR, output.to_dict())
        if self.settings.similarity_hooks:
            set_similarity_hooks(doc)
        if self.settings.set_tensor and doc.tensor.size == 0 and len(doc):
            doc.tensor = output.mixed

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        write_model_files(self.bilm, path)  # spaCy's to_disk writes in place; the CLI stages whole pipelines

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self.set_bilm(load_model(path))
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return model_to_bytes(self.bilm)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ElmoComponent":
        self.set_bilm(model_from_bytes(bytes_data, source=f"pipeline component {self.name!r}"))
        return self


def _write_segment(stored: List[numpy.ndarray], segment: Segment, values: numpy.ndarray) -> None:
    """Copy the kept rows of one segment's values (..., segment length, 2P) into its doc's array."""
    keep = slice(segment.keep_start, segment.keep_end)
    stored[segment.doc_index][..., segment.token_indices[keep], :] = values[..., keep, :]


def _no_forward(model: Model, docs: Any, is_train: bool) -> Any:
    raise ValueError("the elmo component's stand-in model does not run: the biLM runs in the component")


def elmo_component(nlp: Language, name: str = "elmo") -> ElmoComponent:
    """`nlp`'s component `name`, which must be an `elmo` component."""
    component = nlp.get_pipe(name)
    if not isinstance(component, ElmoComponent):
        raise ValueError(f"the pipeline's component {name!r} is not an elmo component")
    return component
