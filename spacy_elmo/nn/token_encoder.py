"""Context-free token encoder: character embeddings -> char-CNN -> highways -> projection."""
from typing import Optional

import torch
from torch import nn

from .config import BiLMConfig


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
    """One convolution per filter width, max-pooled over character positions."""

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, n_filters, width) for width, n_filters in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh

    def forward(self, char_embeddings: torch.Tensor) -> torch.Tensor:
        """(n_tokens, char_embedding_dim, n_chars) -> (n_tokens, n_filters)"""
        pooled = [conv(char_embeddings).max(dim=-1).values for conv in self.convs]
        return self.activation(torch.cat(pooled, dim=-1))


class TokenEncoder(nn.Module):
    """Maps ELMo char ids to context-free token vectors of width `projection_dim`."""

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        # Row 0 is the padded-token id; the loader keeps it at zero.
        self.char_embedding = nn.Embedding(262, config.char_embedding_dim, padding_idx=0)
        self.cnn = CharCNN(config)
        self.highways = nn.ModuleList(Highway(config.n_filters) for _ in range(config.n_highway))
        self.projection: Optional[nn.Linear] = None
        if config.n_filters != config.projection_dim:
            self.projection = nn.Linear(config.n_filters, config.projection_dim)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(..., n_chars) int64 -> (..., projection_dim)"""
        leading = char_ids.shape[:-1]
        flat = char_ids.reshape(-1, char_ids.shape[-1])
        embedded = self.char_embedding(flat).transpose(1, 2)
        x = self.cnn(embedded)
        for highway in self.highways:
            x = highway(x)
        if self.projection is not None:
            x = self.projection(x)
        return x.reshape(*leading, x.shape[-1])
