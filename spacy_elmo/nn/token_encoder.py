"""Context-free token encoder of the character-level biLM: character embeddings -> char-CNN -> highways -> projection.

The char-CNN does no work on the run of padding characters that ends each token, yet
stays exact: the padding character has a learned embedding, so every window that lies
wholly inside that run has the same value per filter (`padding_window_values`), which is
taken into the max for the tokens that have such a window.
"""

from typing import List, Optional, Sequence, cast

import numpy
import torch
from torch import nn

from .chars import N_CHARACTER_IDS, PADDING, begin_of_sentence_ids, end_of_sentence_ids, token_to_char_ids
from .config import BiLMConfig
from .shapes import product_rows, repeat_first_row

PADDING_ID = PADDING + 1
TOKENS_PER_CHUNK = 256
"""Tokens per char-CNN product, grouped by length: each group runs over the positions its
longest token needs (a training batch of some 900 types: 256 is 9-22% faster than 1,024,
128 slower again)."""


class Highway(nn.Module):
    """One highway layer in the bilm-tf convention.

    `g = sigmoid(x W_g + b_g)`, `y = g * relu(x W_t + b_t) + (1 - g) * x`.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., dim) -> (..., dim)"""
        gate = torch.sigmoid(self.gate(x))
        return gate * torch.relu(self.transform(x)) + (1.0 - gate) * x


class CharCNN(nn.Module):
    """One convolution per filter width, max-pooled over character positions, then the
    activation. Convolutions run as one matrix product over all windows."""

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(config.char_embedding_dim, n_filters, width) for width, n_filters in config.filters)
        self.widths = [width for width, _ in config.filters]
        self.n_chars = config.max_characters_per_token
        self.activation = torch.relu if config.activation == "relu" else torch.tanh

    def conv_layers(self) -> List[nn.Conv1d]:
        """The convolutions, one per filter width."""
        return [cast(nn.Conv1d, conv) for conv in self.convs]

    def forward(self, char_embeddings: torch.Tensor, padding_embedding: torch.Tensor, used: torch.Tensor) -> torch.Tensor:
        """char_embeddings: (n_tokens, n_positions, char_dim), the first positions of each token,
        enough to cover what any of them uses plus the widest window;
        padding_embedding: (char_dim,);
        used: (n_tokens,) positions before each token's trailing padding, out of `n_chars`.
        Returns (n_tokens, n_filters)."""
        n_tokens, n_positions, char_dim = char_embeddings.shape
        pooled: List[torch.Tensor] = []
        for width, conv in zip(self.widths, self.conv_layers()):
            weight = conv.weight.reshape(conv.out_channels, char_dim * width).t()
            bias = cast(torch.Tensor, conv.bias)  # the convolutions are built with a bias
            if n_positions >= width:
                windows = char_embeddings.unfold(1, width, 1)  # (n_tokens, n_windows, char_dim, width)
                values = torch.addmm(bias, windows.reshape(-1, char_dim * width), weight)
                best = values.view(n_tokens, -1, conv.out_channels).amax(dim=1)
            else:
                best = torch.full((n_tokens, conv.out_channels), float("-inf"), device=weight.device, dtype=weight.dtype)
            padding_window = padding_embedding.unsqueeze(1).expand(char_dim, width).reshape(1, -1)
            padding_value = torch.addmm(bias, padding_window, weight)
            has_padding_window = (used + width <= self.n_chars).unsqueeze(1)
            pooled.append(torch.where(has_padding_window, torch.maximum(best, padding_value), best))
        return self.activation(torch.cat(pooled, dim=-1))


class TokenEncoder(nn.Module):
    """Maps ELMo char ids to context-free token vectors of width `projection_dim`."""

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        # Row 0 is the padded-token id; the loader keeps it at zero.
        self.char_embedding = nn.Embedding(N_CHARACTER_IDS, config.char_embedding_dim, padding_idx=0)
        self.cnn = CharCNN(config)
        self.max_width = max(width for width, _ in config.filters)
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection: Optional[nn.Linear] = None
        if config.n_filters != config.projection_dim:
            self.projection = nn.Linear(config.n_filters, config.projection_dim)
        self.n_chars = config.max_characters_per_token

    @property
    def embedding_weight(self) -> torch.Tensor:
        """(262, char_dim): the character table; its dtype and device are the encoder's."""
        return self.char_embedding.weight

    def string_ids(self, strings: Sequence[str]) -> numpy.ndarray:
        """(len(strings), n_chars) int64 char ids."""
        if not strings:
            return numpy.zeros((0, self.n_chars), dtype=numpy.int64)
        return numpy.stack([token_to_char_ids(s, self.n_chars) for s in strings])

    def boundary_ids(self) -> numpy.ndarray:
        """(2, n_chars) the char ids of <S> and </S>."""
        return numpy.stack([begin_of_sentence_ids(self.n_chars), end_of_sentence_ids(self.n_chars)])

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(..., n_chars) int64 -> (..., projection_dim). Each distinct token is encoded
        once (a training batch of 2,048 tokens holds about 900 types; in bf16 training, their
        count is rounded up with copies of one of them, see `shapes`); backward sums the
        gradients of its repeats."""
        leading = char_ids.shape[:-1]
        flat = char_ids.reshape(-1, char_ids.shape[-1])
        inverse = None
        if flat.shape[0] > 1:
            flat, inverse = torch.unique(flat, dim=0, return_inverse=True)
            if torch.is_grad_enabled():  # a recurring row count (`shapes`)
                flat = repeat_first_row(flat, product_rows(len(flat), flat.device))
        x = self._char_cnn(flat)
        for highway in self.highways:
            x = highway(x)
        if self.projection is not None:
            x = self.projection(x)
        if inverse is not None:
            x = x.index_select(0, inverse)  # its backward (index_add_) sums repeats in a fixed order
        return x.reshape(*leading, x.shape[-1])

    def _char_cnn(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(n_tokens, n_chars) -> (n_tokens, n_filters), tokens grouped by used length."""
        n_chars = char_ids.shape[1]
        trailing_padding = (char_ids == PADDING_ID).flip(1).long().cumprod(1).sum(1)
        used = n_chars - trailing_padding
        order = torch.argsort(used)
        padding_embedding = self.char_embedding.weight[PADDING_ID]
        outputs = []
        for start in range(0, char_ids.shape[0], TOKENS_PER_CHUNK):
            rows = order[start : start + TOKENS_PER_CHUNK]
            chunk_used = used[rows]
            positions = min(n_chars, int(chunk_used.max()) + self.max_width - 1) if rows.numel() else 0
            embedded = self.char_embedding(char_ids[rows, :positions])
            outputs.append(self.cnn(embedded, padding_embedding, chunk_used))
        if not outputs:
            return self.char_embedding.weight.new_zeros(0, sum(c.out_channels for c in self.cnn.conv_layers()))
        result = torch.cat(outputs)
        return result[torch.argsort(order)]
