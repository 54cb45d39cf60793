"""Thinc layers for downstream components that consume ELMo, as in the paper.

`spacy-elmo.ElmoScalarMix.v1` reads the per-layer vectors that an upstream `elmo`
component stored (`keep_layers = true`) and mixes them with a learned, task-specific
`gamma * softmax(s) . layers`. In a training config the `elmo` component is listed in both
`frozen_components` and `annotating_components`, so it annotates the training docs. spaCy
initializes components on docs that no upstream component has annotated, so for
`spacy train` set `n_elmo_layers` and `elmo_width`; with annotated sample docs they are read
from the docs. Only between such an initialization and the first annotated batch does the
layer give zeros for docs without `doc._.elmo` (spaCy's own listeners do the same); any
other doc without it is an error.
"""
from typing import Callable, List, Optional, Tuple

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Model, chain, with_array
from thinc.types import Floats1d, Floats2d, Floats3d

from .extensions import doc_elmo


UNANNOTATED_OK = "zeros_for_unannotated_docs"


@registry.architectures("spacy-elmo.ElmoScalarMix.v1")
def ElmoScalarMix(
    width: Optional[int] = None,
    dropout: float = 0.0,
    n_elmo_layers: Optional[int] = None,
    elmo_width: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, width) per doc: learned layer mix, then an optional linear map to `width`.

    n_elmo_layers: layers stored by the elmo component (its n_layers + 1).
    elmo_width: width of each stored layer (2 * projection_dim).
    """
    mix: Model[List[Doc], List[Floats2d]] = Model(
        "elmo_scalar_mix",
        _mix_forward,
        init=_mix_init,
        params={"scalars": None, "gamma": None},
        dims={"nL": n_elmo_layers, "nO": elmo_width},
        attrs={UNANNOTATED_OK: False},
    )
    head: List[Model] = [Dropout(dropout)] if dropout else []
    if width is not None:
        head.append(Linear(nO=width))
    if not head:
        return mix
    return chain(mix, with_array(head[0] if len(head) == 1 else chain(*head)))


def _stored_layers(doc: Doc) -> Floats3d:
    output = doc_elmo(doc)
    if output is None or output.layers is None:
        raise ValueError(
            "spacy-elmo.ElmoScalarMix.v1 needs doc._.elmo.layers: put the 'elmo' component before this one "
            "with keep_layers = true, and list it in [training] annotating_components"
        )
    return output.layers


def _mix_init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    annotated = [doc for doc in X or [] if doc_elmo(doc) is not None]
    if annotated:
        n_layers, _, width = _stored_layers(annotated[0]).shape
        model.set_dim("nL", n_layers)
        model.set_dim("nO", width)
    elif model.has_dim("nL") and model.has_dim("nO"):
        model.attrs[UNANNOTATED_OK] = True
    else:
        raise ValueError(
            "spacy-elmo.ElmoScalarMix.v1 cannot see doc._.elmo on its sample docs: "
            "set n_elmo_layers (the elmo model's n_layers + 1) and elmo_width (2 * projection_dim)"
        )
    model.set_param("scalars", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _mix_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops = model.ops
    scalars: Floats1d = model.get_param("scalars")
    gamma = float(model.get_param("gamma")[0])
    weights = ops.softmax(scalars)
    if model.attrs[UNANNOTATED_OK]:
        if not any(doc_elmo(doc) is not None for doc in docs):
            return [ops.alloc2f(len(doc), model.get_dim("nO")) for doc in docs], lambda d: []
        model.attrs[UNANNOTATED_OK] = False
    layers = [ops.asarray3f(_stored_layers(doc)) for doc in docs]
    expected = (model.get_dim("nL"), model.get_dim("nO"))
    for doc_layers in layers:
        if (doc_layers.shape[0], doc_layers.shape[2]) != expected:
            raise ValueError(
                f"doc._.elmo.layers has {doc_layers.shape[0]} layers of width {doc_layers.shape[2]}, "
                f"but this spacy-elmo.ElmoScalarMix.v1 was set up for {expected[0]} of width {expected[1]}"
            )
    mixed = [ops.xp.tensordot(weights, doc_layers, axes=1) for doc_layers in layers]
    outputs = [gamma * m for m in mixed]

    def backprop(d_outputs: List[Floats2d]) -> List[Doc]:
        d_weights = ops.alloc1f(weights.shape[0])
        d_gamma = 0.0
        for doc_layers, doc_mixed, d_out in zip(layers, mixed, d_outputs):
            d_gamma += float((d_out * doc_mixed).sum())
            d_weights += gamma * ops.xp.tensordot(doc_layers, d_out, axes=([1, 2], [0, 1]))
        d_scalars = weights * (d_weights - (weights * d_weights).sum())
        model.inc_grad("scalars", d_scalars)
        model.inc_grad("gamma", ops.asarray1f([d_gamma]))
        return []

    return outputs, backprop
