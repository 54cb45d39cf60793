"""Thinc layers for downstream components that consume ELMo, as in the paper.

`spacy-elmo.ElmoScalarMix.v1` reads the per-layer vectors that an upstream `elmo`
component stored (`keep_layers = true`) and mixes them with a learned, task-specific
`gamma * softmax(s) . layers`. In a training config the `elmo` component is listed in both
`frozen_components` and `annotating_components`, so it annotates the training docs.
"""
from typing import Callable, List, Optional, Tuple

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain, with_array, Linear, Dropout
from thinc.types import Floats1d, Floats2d, Floats3d

from .extensions import doc_elmo


@registry.architectures("spacy-elmo.ElmoScalarMix.v1")
def ElmoScalarMix(width: Optional[int] = None, dropout: float = 0.0) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> (n_tokens, width) per doc: learned layer mix, then an optional linear map to `width`."""
    mix: Model[List[Doc], List[Floats2d]] = Model(
        "elmo_scalar_mix", _mix_forward, init=_mix_init, params={"scalars": None, "gamma": None}, dims={"nO": None}
    )
    if width is None:
        return mix if not dropout else chain(mix, with_array(Dropout(dropout)))
    layers = [Dropout(dropout), Linear(nO=width)] if dropout else [Linear(nO=width)]
    return chain(mix, with_array(chain(*layers)))


def _stored_layers(doc: Doc) -> Floats3d:
    output = doc_elmo(doc)
    if output is None or output.layers is None:
        raise ValueError(
            "spacy-elmo.ElmoScalarMix.v1 needs doc._.elmo.layers: put the 'elmo' component before this one "
            "with keep_layers = true, and list it in [training] annotating_components"
        )
    return output.layers


def _mix_init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[List[Floats2d]] = None) -> None:
    if not X:
        raise ValueError("spacy-elmo.ElmoScalarMix.v1 is initialized from sample docs that carry doc._.elmo")
    n_layers, _, width = _stored_layers(X[0]).shape
    model.set_param("scalars", model.ops.alloc1f(n_layers))
    model.set_param("gamma", model.ops.asarray1f([1.0]))
    model.set_dim("nO", width)


def _mix_forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[List[Floats2d], Callable]:
    ops = model.ops
    scalars: Floats1d = model.get_param("scalars")
    gamma = float(model.get_param("gamma")[0])
    weights = ops.softmax(scalars)
    layers = [ops.asarray3f(_stored_layers(doc)) for doc in docs]
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
