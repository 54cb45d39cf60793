"""The paper's task-specific layer mix: gamma * sum_j softmax(s)_j * h_j."""

from typing import Optional, Sequence

import torch
from torch import nn


class ScalarMix(nn.Module):
    """Learned softmax-normalized weights over layers and a global scale gamma."""

    def __init__(self, n_layers: int, initial_scalars: Optional[Sequence[float]] = None, gamma: float = 1.0) -> None:
        super().__init__()
        scalars = [0.0] * n_layers if initial_scalars is None else list(initial_scalars)
        if len(scalars) != n_layers:
            raise ValueError(f"expected {n_layers} initial scalars, got {len(scalars)}")
        self.scalars = nn.Parameter(torch.tensor(scalars, dtype=torch.float32))
        self.gamma = nn.Parameter(torch.tensor(float(gamma)))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """(n_layers, ..., dim) -> (..., dim)"""
        weights = torch.softmax(self.scalars, dim=0)
        return self.gamma * torch.tensordot(weights, layers, dims=1)
