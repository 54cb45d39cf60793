"""Thinc layers for downstream components that consume ELMo, as in the paper.

A mix reads the per-layer vectors that an upstream `elmo` component stored
(`keep_layers = true`) and combines them with learned, task-specific weights:
`gamma * sum_j softmax(s)_j * h_j` (the paper's eq. 1). In a training config the `elmo`
component is listed in both `frozen_components` and `annotating_components`, so it
annotates the training docs and is never updated.

- `spacy-elmo.ElmoScalarMix.v2`: the mix as bilm-tf defines it (s = 0 and gamma = 1 at
  the start, dropout on the ELMo vector, optional `l2_coef * ||s||^2`, optional layer
  normalization of every layer, per token).
- `spacy-elmo.ElmoLayers.v1`: every layer side by side (n_layers * elmo_width per token), with
  dropout, for a next layer that learns its own map of each layer instead of one weight each.
- `spacy-elmo.WithElmo.v1`: `[features; ELMo]` mapped to `width`, where `features` is any
  `List[Doc] -> List[Floats2d]` layer: a spaCy embed such as `spacy.MultiHashEmbed.v2` (the
  paper's ELMo at the input, as `embed` of `spacy.Tok2Vec.v2`) or a `spacy.Tok2VecListener.v1`
  (a component's own mix on top of a shared tok2vec).
- `spacy-elmo.ElmoScalarMix.v1`: the first mix (kept for saved pipelines and configs).

The `elmo` component gives every mix downstream of it its dimensions when spaCy links the
pipeline (see `ElmoComponent.find_listeners`), so `n_elmo_layers` and `elmo_width` are only
needed without one. spaCy initializes components on docs that no upstream component has
annotated: until a mix has seen annotated docs, it gives zeros for unannotated docs outside
training (spaCy's own listeners do the same); an unannotated doc in training is an error.
"""

import math
from typing import Any, Callable, List, NamedTuple, Optional, Set, Tuple, cast

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats1d, Floats2d, Floats3d

from .extensions import doc_elmo

MIX_NAME = "elmo_scalar_mix"
LAYERS_NAME = "elmo_layers"
SEEN_ANNOTATED = "seen_annotated_docs"
"""attr: True once the mix has read doc._.elmo (from then on an unannotated doc is an error)."""
SHAPE_GIVEN = "shape_given"
"""attr: True when the shape came from an elmo component or annotated docs, not from the config."""
LAYERS_INITIALIZED = "layers_initialized"
"""attr of `ElmoLayers`, which has no weights: True once initialized (the layer after it then
has weights for its shape, which may not change)."""
WEIGHTS_PROBLEM = "elmo_weights_problem"
"""attr: why the elmo component could not read its weights' shape when it was asked (its
weights are read only when it is initialized, which spaCy skips for a frozen component);
the mix names it where it finds no shape elsewhere."""
GAMMA_PARAM = "gamma_param"
"""attr: the name of the parameter holding gamma ("gamma", or "gamma_offset" with gamma = 1 + it)."""
LAYER_NORM_EPS = 1e-12
"""bilm-tf's epsilon in `weight_layers(do_layer_norm=True)`."""

_TRAINED_MIX_IDS: Set[int] = set()
"""`Model.id` (unique in a process) of the mixes that have run a training forward pass."""


@registry.architectures("spacy-elmo.ElmoScalarMix.v2")
def ElmoScalarMix_v2(
    dropout: float = 0.5,
    l2_coef: float = 0.0,
    layer_norm: bool = False,
    n_elmo_layers: Optional[int] = None,
    elmo_width: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, elmo_width) per doc: `gamma * sum_j softmax(s)_j * norm(h_j)`.

    dropout: on the mixed ELMo vector in training. It is this layer's own rate: spaCy's
        `[training] dropout` does not override it.
    l2_coef: lambda of bilm-tf's `l2_coef * sum(s ** 2)`: `2 * l2_coef * s` is added to the
        gradient of s at every backward pass. spaCy's tagger and parser losses are sums over
        the batch's tokens where bilm-tf's are means, so the paper's 0.001 weighs about
        batch-size times less here.
    layer_norm: normalize each layer of each token to zero mean and unit variance over its
        `elmo_width` values before mixing (bilm-tf and AllenNLP use one mean and variance
        over the whole batch instead, which makes a doc's vectors depend on its batch).
    n_elmo_layers, elmo_width: only without an `elmo` component before this one in the
        pipeline: its n_layers + 1 and 2 * projection_dim.

    gamma is stored as `gamma_offset` = gamma - 1, so that weight decay (spaCy's
    `L2_is_weight_decay`) pulls gamma toward 1, as it pulls s toward 0 (the plain average).
    """
    _check_rate("spacy-elmo.ElmoScalarMix.v2", "dropout", dropout)
    if not (_is_number(l2_coef) and 0 <= l2_coef < math.inf):
        raise ValueError(f"spacy-elmo.ElmoScalarMix.v2: l2_coef must be a finite number, not negative, got {l2_coef!r}")
    return _mix_model(
        "spacy-elmo.ElmoScalarMix.v2",
        n_elmo_layers,
        elmo_width,
        gamma_param="gamma_offset",
        dropout=dropout,
        l2_coef=l2_coef,
        layer_norm=layer_norm,
    )


@registry.architectures("spacy-elmo.ElmoLayers.v1")
def ElmoLayers(
    dropout: float = 0.1,
    n_elmo_layers: Optional[int] = None,
    elmo_width: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, n_elmo_layers * elmo_width) per doc: every stored layer side by
    side, token layer first, so that the next layer learns a map of each (where a scalar
    mix gives each layer one weight).

    dropout: on the concatenated vector in training (this layer's own rate).
    n_elmo_layers, elmo_width: only without an `elmo` component before this one in the
        pipeline: its n_layers + 1 and 2 * projection_dim.
    """
    source = "spacy-elmo.ElmoLayers.v1"
    _check_rate(source, "dropout", dropout)
    _check_shape(source, n_elmo_layers, elmo_width)
    return Model(
        LAYERS_NAME,
        _layers_forward,
        init=_layers_init,
        dims={"nL": n_elmo_layers, "nW": elmo_width, "nO": None},  # nO = nL * nW, set by initialize
        attrs={"source": source, "elmo_dropout": dropout, SEEN_ANNOTATED: False, SHAPE_GIVEN: False, LAYERS_INITIALIZED: False},
    )


@registry.architectures("spacy-elmo.ElmoScalarMix.v1")
def ElmoScalarMix(
    width: Optional[int] = None,
    dropout: float = 0.0,
    n_elmo_layers: Optional[int] = None,
    elmo_width: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, width) per doc: learned layer mix, then an optional linear map to `width`.

    dropout: above 0, a thinc `Dropout` after the mix, whose rate spaCy's `[training] dropout`
        then replaces (at 0 there is none, and the training dropout does not reach the mix).
    n_elmo_layers: layers stored by the elmo component (its n_layers + 1).
    elmo_width: width of each stored layer (2 * projection_dim).
    """
    mix = _mix_model("spacy-elmo.ElmoScalarMix.v1", n_elmo_layers, elmo_width, gamma_param="gamma")
    head: List[Model] = [Dropout(dropout)] if dropout else []
    if width is not None:
        head.append(Linear(nO=width))
    if not head:
        return mix
    return chain(mix, with_array(head[0] if len(head) == 1 else chain(*head)))


@registry.architectures("spacy-elmo.WithElmo.v1")
def WithElmo(
    features: Model[List[Doc], List[Floats2d]],
    mix: Model[List[Doc], List[Floats2d]],
    width: int,
    maxout_pieces: int = 3,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, width) per doc: `[features(doc); mix(doc)]` through a layer-normalized
    Maxout to `width` (how spaCy's `MultiHashEmbed` combines its own features; as there, the
    Maxout's dropout follows spaCy's `[training] dropout`)."""
    for name, value in (("width", width), ("maxout_pieces", maxout_pieces)):
        if not _is_integer(value) or value < 1:
            raise ValueError(f"spacy-elmo.WithElmo.v1: {name} must be a positive integer, got {value!r}")
    combine = Maxout(nO=width, nP=maxout_pieces, dropout=0.0, normalize=True)
    return chain(concatenate(features, mix), with_array(combine))


def is_elmo_mix(model: Model) -> bool:
    return model.name == MIX_NAME


def reads_elmo(model: Model) -> bool:
    """Whether `model` reads doc._.elmo.layers (a mix or `ElmoLayers`): the elmo component gives it their shape."""
    return model.name in (MIX_NAME, LAYERS_NAME)


def mix_weights(model: Model) -> Floats1d:
    """softmax(s): the normalized layer weights of an ELMo mix."""
    return cast(Floats1d, model.ops.softmax(model.get_param("scalars")))


def mix_gamma(model: Model) -> float:
    """The scale gamma of an ELMo mix."""
    name = model.attrs[GAMMA_PARAM]
    value = float(model.get_param(name)[0])
    return 1.0 + value if name == "gamma_offset" else value


class LearnedMix(NamedTuple):
    """What one ELMo mix of a pipeline learned."""

    component: str
    weights: List[float]
    """softmax(s), layer 0 (the token encoding) first."""
    gamma: float


def learned_mixes(nlp: Any) -> List[LearnedMix]:
    """The ELMo mixes of every component of a spaCy pipeline, in pipeline order."""
    found = []
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if is_elmo_mix(node) and node.has_param("scalars"):
                    found.append(LearnedMix(name, [float(w) for w in mix_weights(node)], mix_gamma(node)))
    return found


def set_mix_dims(model: Model, n_layers: int, width: int, where: str) -> None:
    """Give a mix (or `ElmoLayers`) the shape of the elmo component's layers: nL layers of
    width nO (of `ElmoLayers`: nW; its output width nO = nL * nW comes with its initialize).

    A shape given this way before the mix has parameters may be given again (a pipeline
    being loaded first sees the model at its `weights` path, then its own); a shape typed
    in the config, or one the mix has learned weights for, must match."""
    width_dim = _width_dim(model)
    _settle_layers_dims(model)
    wanted = {"nL": n_layers, width_dim: width}
    current = {dim: model.get_dim(dim) for dim in wanted if model.has_dim(dim)}
    if current == wanted:
        return
    has_weights = bool(model.has_param("scalars")) or bool(model.attrs.get(LAYERS_INITIALIZED))
    provisional = model.attrs[SHAPE_GIVEN] and not has_weights
    if not provisional and any(current[dim] != wanted[dim] for dim in current):
        found = f"{current.get('nL', '?')} layers of width {current.get(width_dim, '?')}"
        reason = (
            "its weights (or those of the layer after it) are for another biLM's layers"
            if has_weights
            else "drop n_elmo_layers / elmo_width from its config (they are read from the elmo component)"
        )
        raise ValueError(f"{where}: an ELMo mix set up for {found}, but the elmo component's model gives {n_layers} layers of width {width}: {reason}")
    for dim, value in wanted.items():
        model.set_dim(dim, value, force=True)
    if width_dim == "nW" and model.has_dim("nO"):
        model.set_dim("nO", n_layers * width, force=True)
    model.attrs[SHAPE_GIVEN] = True
    model.attrs.pop(WEIGHTS_PROBLEM, None)


def note_weights_problem(model: Model, problem: str) -> None:
    """Keep, for the mix's own error, why the elmo component could not give it a shape."""
    model.attrs[WEIGHTS_PROBLEM] = problem


def _width_dim(model: Model) -> str:
    """The dim holding the width of one stored layer: nO of a mix, nW of `ElmoLayers`."""
    return "nW" if model.name == LAYERS_NAME else "nO"


def _settle_layers_dims(model: Model) -> None:
    """`ElmoLayers` saved before it had nW kept one layer's width in nO, which loading sets
    as saved (after the elmo component gave nL and nW): read it as nW and make nO the
    output width, nL * nW."""
    if model.name != LAYERS_NAME or not (model.has_dim("nO") and model.has_dim("nL")):
        return
    n_layers, saved = model.get_dim("nL"), model.get_dim("nO")
    if not model.has_dim("nW"):
        model.set_dim("nW", saved)
    width = model.get_dim("nW")
    if saved == n_layers * width:
        return
    if saved != width:
        raise ValueError(
            f"{model.attrs['source']}: saved for layers of width {saved}, but the elmo component's model gives "
            f"{n_layers} layers of width {width}: its weights (or those of the layer after it) are for another biLM's layers"
        )
    model.set_dim("nO", n_layers * width, force=True)


def has_trained(model: Model) -> bool:
    """Whether the mix has run a training forward pass in this process."""
    return model.id in _TRAINED_MIX_IDS


def _mix_model(
    source: str,
    n_elmo_layers: Optional[int],
    elmo_width: Optional[int],
    gamma_param: str,
    dropout: float = 0.0,
    l2_coef: float = 0.0,
    layer_norm: bool = False,
) -> Model[List[Doc], List[Floats2d]]:
    _check_shape(source, n_elmo_layers, elmo_width)
    return Model(
        MIX_NAME,
        _mix_forward,
        init=_mix_init,
        params={"scalars": None, gamma_param: None},
        dims={"nL": n_elmo_layers, "nO": elmo_width},
        attrs={
            "source": source,
            GAMMA_PARAM: gamma_param,
            "elmo_dropout": dropout,
            "l2_coef": l2_coef,
            "layer_norm": layer_norm,
            SEEN_ANNOTATED: False,
            SHAPE_GIVEN: False,
        },
    )


def _check_shape(source: str, n_elmo_layers: Optional[int], elmo_width: Optional[int]) -> None:
    for name, value in (("n_elmo_layers", n_elmo_layers), ("elmo_width", elmo_width)):
        if value is not None and (not _is_integer(value) or value < 1):
            raise ValueError(f"{source}: {name} must be a positive integer (or left out), got {value!r}")


def _check_rate(source: str, name: str, value: float) -> None:
    if not (_is_number(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{source}: {name} must be a number in [0, 1), got {value!r}")


def _is_number(value: Any) -> bool:
    """An int or float, not a bool nor a string of digits (a config's quoted "0.1" passes
    spaCy's validation as a float but arrives as the string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _stored_layers(model: Model, doc: Doc) -> Floats3d:
    output = doc_elmo(doc)
    if output is None or output.layers is None:
        raise ValueError(
            f"{model.attrs['source']} needs doc._.elmo.layers: put the 'elmo' component before this one "
            "with keep_layers = true, and list it in [training] frozen_components and annotating_components"
        )
    return cast(Floats3d, output.layers)


def _mix_init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    _take_layer_shape(model, X, Y)
    model.set_param("scalars", model.ops.alloc1f(model.get_dim("nL")))
    gamma_param = model.attrs[GAMMA_PARAM]
    model.set_param(gamma_param, model.ops.asarray1f([0.0 if gamma_param == "gamma_offset" else 1.0]))


def _layers_init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    _take_layer_shape(model, X, Y)
    model.set_dim("nO", model.get_dim("nL") * model.get_dim("nW"), force=True)
    model.attrs[LAYERS_INITIALIZED] = True


def _take_layer_shape(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    """The layers' shape from annotated sample docs, else from the elmo component or the config."""
    annotated = [doc for doc in X or [] if doc_elmo(doc) is not None]
    if annotated:
        n_layers, _, width = _stored_layers(model, annotated[0]).shape
        set_mix_dims(model, n_layers, width, model.attrs["source"])
    elif not (model.has_dim("nL") and model.has_dim(_width_dim(model))):
        if model.attrs.get(WEIGHTS_PROBLEM):
            raise ValueError(f"{model.attrs['source']} needs the elmo component's layers, but {model.attrs[WEIGHTS_PROBLEM]}")
        raise ValueError(
            f"{model.attrs['source']} cannot see doc._.elmo on its sample docs and has no elmo component to ask: "
            "put an 'elmo' component with loadable weights before this one in the pipeline, "
            "or set n_elmo_layers (the elmo model's n_layers + 1) and elmo_width (2 * projection_dim)"
        )
    model.attrs[SEEN_ANNOTATED] = False  # a new start: zeros for unannotated docs until annotated ones come


def _doc_layers(model: Model, docs: List[Doc], is_train: bool) -> Optional[List[Floats3d]]:
    """Each doc's stored layers (n_layers, n_tokens, width), or None for the zeros of initialization."""
    if not is_train and not model.attrs[SEEN_ANNOTATED] and all(doc_elmo(doc) is None for doc in docs):
        return None
    layers = [model.ops.asarray3f(_stored_layers(model, doc)) for doc in docs]
    expected = (model.get_dim("nL"), model.get_dim(_width_dim(model)))
    for doc_layers in layers:
        if (doc_layers.shape[0], doc_layers.shape[2]) != expected:
            raise ValueError(
                f"doc._.elmo.layers has {doc_layers.shape[0]} layers of width {doc_layers.shape[2]}, "
                f"but this {model.attrs['source']} was set up for {expected[0]} of width {expected[1]}"
            )
    model.attrs[SEEN_ANNOTATED] = True
    return layers


def _normalize_tokens(model: Model, layers: Floats3d) -> Floats3d:
    """(n_layers, n_tokens, width): each (layer, token) row to zero mean and unit variance."""
    xp = model.ops.xp
    centred = layers - xp.mean(layers, axis=-1, keepdims=True)
    return centred / xp.sqrt((centred**2).mean(axis=-1, keepdims=True) + LAYER_NORM_EPS)


def _layers_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops = model.ops
    if is_train:
        _TRAINED_MIX_IDS.add(model.id)
    _settle_layers_dims(model)
    layers = _doc_layers(model, docs, is_train)
    width = model.get_dim("nL") * model.get_dim("nW")
    if layers is None:
        return [ops.alloc2f(len(doc), width) for doc in docs], lambda d_outputs: []
    side_by_side = [ops.xp.ascontiguousarray(doc_layers.transpose((1, 0, 2))).reshape(-1, width) for doc_layers in layers]
    rate = model.attrs["elmo_dropout"] if is_train else 0.0
    outputs = [x * ops.get_dropout_mask(x.shape, rate) for x in side_by_side] if rate else side_by_side
    return outputs, lambda d_outputs: []


def _mix_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops = model.ops
    if is_train:
        _TRAINED_MIX_IDS.add(model.id)
    layers = _doc_layers(model, docs, is_train)
    if layers is None:
        return [ops.alloc2f(len(doc), model.get_dim("nO")) for doc in docs], lambda d_outputs: []
    if model.attrs["layer_norm"]:
        layers = [_normalize_tokens(model, doc_layers) for doc_layers in layers]
    scalars = cast(Floats1d, model.get_param("scalars"))
    weights = cast(Floats1d, ops.softmax(scalars))
    gamma = mix_gamma(model)
    mixed = [ops.xp.tensordot(weights, doc_layers, axes=1) for doc_layers in layers]
    rate = model.attrs["elmo_dropout"] if is_train else 0.0
    masks = [ops.get_dropout_mask(m.shape, rate) for m in mixed] if rate else None
    outputs = [gamma * m * masks[i] if masks else gamma * m for i, m in enumerate(mixed)]

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        d_weights = ops.alloc1f(weights.shape[0])
        d_gamma = 0.0
        for i, (doc_layers, doc_mixed, d_out) in enumerate(zip(layers, mixed, d_outputs)):
            if masks:
                d_out = d_out * masks[i]
            d_gamma += float((d_out * doc_mixed).sum())
            d_weights += gamma * ops.xp.tensordot(doc_layers, d_out, axes=([1, 2], [0, 1]))
        d_scalars = weights * (d_weights - float(ops.xp.sum(weights * d_weights)))
        if model.attrs["l2_coef"]:
            d_scalars = d_scalars + 2.0 * model.attrs["l2_coef"] * scalars
        model.inc_grad("scalars", d_scalars)
        model.inc_grad(model.attrs[GAMMA_PARAM], ops.asarray1f([d_gamma]))
        return []

    return outputs, backprop
