"""The biLM training objective (paper, section 3.1): a forward LM predicts each next token
from the top forward layer, a backward LM each previous token from the top backward layer,
through one softmax shared by both directions; the loss is the mean of the two."""

from typing import NamedTuple, Sequence, Union

import torch
from torch import nn

from .bilm import BiLM
from .softmax import FullSoftmax
from .special_tokens import BOS_ID, EOS_ID


class LMLoss(NamedTuple):
    forward_nll: torch.Tensor  # () summed over predictions
    backward_nll: torch.Tensor  # () summed over predictions
    predictions: int  # per direction: every token plus </S> (forward) or <S> (backward)

    @property
    def loss(self) -> torch.Tensor:
        """Mean of the two directions' mean negative log-likelihoods."""
        return (self.forward_nll + self.backward_nll) / (2 * self.predictions)


class BiLMObjective(nn.Module):
    """The biLM and its shared softmax head.

    In training mode, `dropout` applies to every LSTM layer's input and to the top
    states before the softmax, as in bilm-tf, and `weight_drop` to every LSTM layer's
    recurrent weights (one mask per batch, `run_layers`). Both directions go through one
    head call, so a sampled head draws one set of negatives for both (bilm-tf draws one
    per direction)."""

    def __init__(self, bilm: BiLM, head: FullSoftmax, dropout: float = 0.0, weight_drop: float = 0.0) -> None:
        super().__init__()
        for name, rate in (("dropout", dropout), ("weight_drop", weight_drop)):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate}")
        self.dropout = dropout
        self.weight_drop = weight_drop
        if head.weight.shape[1] != bilm.config.projection_dim:
            raise ValueError(f"the softmax takes width {head.weight.shape[1]}, the biLM gives {bilm.config.projection_dim}")
        self.bilm = bilm
        self.head = head

    def forward(self, input_ids: torch.Tensor, lengths: Union[torch.Tensor, Sequence[int]], token_ids: torch.Tensor) -> LMLoss:
        """input_ids: (batch, time, *id_shape) what the biLM reads (`BiLM.input_ids`);
        lengths: (batch,); token_ids: (batch, time) softmax vocabulary ids of the tokens
        (any value past a row's length)."""
        lengths = torch.as_tensor(lengths, dtype=torch.long, device=input_ids.device)
        dropout = self.dropout if self.training else 0.0
        weight_drop = self.weight_drop if self.training else 0.0
        forward_top, backward_top = self.bilm.top_states(input_ids, lengths, dropout, weight_drop)
        if dropout:
            forward_top = nn.functional.dropout(forward_top, dropout)
            backward_top = nn.functional.dropout(backward_top, dropout)
        batch, time = token_ids.shape
        framed = token_ids.new_full((batch, time + 2), EOS_ID)
        framed[:, 0] = BOS_ID
        framed[:, 1 : time + 1] = token_ids
        framed[torch.arange(batch, device=framed.device), lengths + 1] = EOS_ID
        positions = torch.arange(time + 1, device=framed.device).unsqueeze(0)
        valid = positions <= lengths.unsqueeze(1)  # (batch, time + 1): n + 1 predictions per row
        # forward: state at j predicts token j + 1; backward: state at j + 1 predicts token j.
        # One head call for both directions (one gradient of the large softmax matrix).
        hidden = torch.cat([forward_top[:, : time + 1][valid], backward_top[:, 1:][valid]])
        targets = torch.cat([framed[:, 1:][valid], framed[:, : time + 1][valid]])
        nll = self.head(hidden, targets)
        predictions = int(valid.sum())
        return LMLoss(nll[:predictions].sum(), nll[predictions:].sum(), predictions)
