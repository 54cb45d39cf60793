"""A fixed, "warm" initial LSTM state computed once from warm-up text.

The published ELMo models were trained with LSTM state carried from one batch to the
next, so they rarely saw a zero state: vectors near a sentence start are "cold" under
zero initialization. The reference implementations warm up by carrying state across
calls, which makes a sentence's vectors depend on what was embedded before it. Here the
warm-up happens once: the warm-up sentences run statefully in parallel rows, and the
final states, averaged over rows, become every row's initial state. Outputs stay
deterministic and independent of batch composition.
"""

import dataclasses
import math
from typing import List, Sequence

import torch

from .bilm import BiLM, StatefulBiLM


def with_warm_state(bilm: BiLM, sentences: Sequence[Sequence[str]], rows: int = 16) -> BiLM:
    """A copy of `bilm` whose default initial state is warmed on `sentences`.

    The sentences are cut into `rows` contiguous runs (so each row reads running text, as
    in training), run statefully side by side, and the rows' final h (n_layers, P) and
    c (n_layers, H) are averaged per direction into `warm_h` / `warm_c`.
    """
    sentences = [list(s) for s in sentences if len(s)]
    if not sentences:
        raise ValueError("warm-up needs at least one non-empty sentence")
    rows = max(1, min(rows, len(sentences)))
    warm = BiLM(dataclasses.replace(bilm.config, warm_state=True), bilm.words).to(bilm.device)
    warm.load_state_dict(bilm.state_dict(), strict=False)
    runner = StatefulBiLM(bilm)
    per_row = math.ceil(len(sentences) / rows)
    dealt: List[List[Sequence[str]]] = [sentences[r * per_row : (r + 1) * per_row] for r in range(rows)]
    dealt = [row for row in dealt if row]
    rows = len(dealt)
    with torch.no_grad():
        for step in range(len(dealt[0])):
            batch = [row[step] for row in dealt if step < len(row)]
            ids = warm.input_ids(batch).to(warm.device)
            runner(ids, [len(s) for s in batch])
        assert runner.state is not None
        for d, direction in enumerate(runner.state):
            for k, (h, c) in enumerate(direction):
                warm.warm_h[d, k] = h[:rows].mean(dim=0)
                warm.warm_c[d, k] = c[:rows].mean(dim=0)
    return warm.eval()


def without_warm_state(bilm: BiLM) -> BiLM:
    """A copy of `bilm` that starts from zero state (for training, which never uses one)."""
    if not bilm.config.warm_state:
        return bilm
    plain = BiLM(dataclasses.replace(bilm.config, warm_state=False), bilm.words)
    plain.load_state_dict({k: v for k, v in bilm.state_dict().items() if not k.startswith("warm_")})
    return plain.train(bilm.training)
