"""Exact (fully normalized) perplexity of a biLM over tokenized sentences."""
import contextlib
import math
from typing import Dict, NamedTuple, Sequence

import torch

from ..nn.objective import BiLMObjective
from .data import Sentence, Vocabulary, budget_batches, to_tensors


class Perplexity(NamedTuple):
    forward: float
    backward: float
    mean: float
    """exp of the mean of both directions' per-token NLL (bilm-tf's reported figure)."""
    predictions: int
    """Per direction: tokens plus one sentence boundary per sentence."""

    def as_dict(self, prefix: str = "") -> Dict[str, float]:
        return {f"{prefix}{name}": value for name, value in self._asdict().items()}


def perplexity(
    objective: BiLMObjective,
    sentences: Sequence[Sentence],
    vocab: Vocabulary,
    tokens_per_batch: int = 4096,
    device: torch.device = torch.device("cpu"),
    autocast: bool = False,
) -> Perplexity:
    """Perplexities of the forward LM, the backward LM and both, with the full softmax
    whatever head trained the model (the objective is put in eval mode for the call)."""
    if not sentences:
        raise ValueError("no sentences to evaluate on")
    was_training = objective.training
    objective.eval()
    forward_nll = backward_nll = 0.0
    predictions = 0
    ordered = sorted(sentences, key=len, reverse=True)
    precision = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    try:
        with torch.no_grad(), precision:
            for batch in budget_batches(ordered, tokens_per_batch):
                tensors = to_tensors(batch, vocab, objective.bilm.config.max_characters_per_token)
                result = objective(*(t.to(device) for t in tensors))
                forward_nll += float(result.forward_nll)
                backward_nll += float(result.backward_nll)
                predictions += result.predictions
    finally:
        objective.train(was_training)
    return Perplexity(
        math.exp(forward_nll / predictions),
        math.exp(backward_nll / predictions),
        math.exp((forward_nll + backward_nll) / (2 * predictions)),
        predictions,
    )
