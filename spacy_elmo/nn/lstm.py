"""A unidirectional LSTM with cell clipping, output projection and projection clipping.

This is the cell of bilm-tf/AllenNLP ELMo. `nn.LSTM(proj_size=...)` cannot be used: it
has no clipping. The input projection is one matrix product over all time steps; the
time loop only does the recurrent product and the gate arithmetic, and only for the rows
whose sequence is still running (batches are sorted by length, longest first).
"""
from typing import List, Optional, Tuple

import torch
from torch import nn

LSTMState = Tuple[torch.Tensor, torch.Tensor]
"""(h, c): h is (batch, output_dim), c is (batch, cell_dim)."""
GateWeights = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(input weight (4H, in), recurrent weight transposed (out, 4H), bias (4H,)), g rows doubled."""


class ProjectedLSTM(nn.Module):
    """Gate order i, f, g, o (PyTorch's). As in TensorFlow's LSTMCell, a constant
    `forget_bias` is added to the forget gate on top of the learned `bias`."""

    def __init__(
        self,
        input_dim: int,
        cell_dim: int,
        projection_dim: Optional[int],
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        forget_bias: float = 1.0,
    ) -> None:
        super().__init__()
        self.forget_bias = forget_bias
        self.input_dim = input_dim
        self.cell_dim = cell_dim
        self.output_dim = projection_dim if projection_dim is not None else cell_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.input_weight = nn.Parameter(torch.empty(4 * cell_dim, input_dim))
        self.recurrent_weight = nn.Parameter(torch.empty(4 * cell_dim, self.output_dim))
        self.bias = nn.Parameter(torch.zeros(4 * cell_dim))
        self.projection: Optional[nn.Parameter] = None
        if projection_dim is not None:
            self.projection = nn.Parameter(torch.empty(projection_dim, cell_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = self.cell_dim**-0.5
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)
        with torch.no_grad():
            self.bias.zero_()

    def zero_state(self, batch_size: int, like: torch.Tensor) -> LSTMState:
        """Zeros on `like`'s device, in float32 at least (the state of a bf16 model stays fp32)."""
        dtype = torch.promote_types(like.dtype, torch.float32)
        h = like.new_zeros(batch_size, self.output_dim, dtype=dtype)
        c = like.new_zeros(batch_size, self.cell_dim, dtype=dtype)
        return h, c

    def forward(
        self, inputs: torch.Tensor, batch_sizes: List[int], state: Optional[LSTMState] = None
    ) -> Tuple[torch.Tensor, LSTMState]:
        """Run left to right over a length-sorted batch.

        inputs: (batch, time, input_dim), rows sorted by length, longest first.
        batch_sizes: for each step t, how many rows are still running.
        state: initial (h, c) per row, zeros if None.
        Returns outputs (batch, time, output_dim), zero past each row's length, and the
        final (h, c) of each row, taken at that row's last step.
        """
        batch, time, _ = inputs.shape
        h, c = state if state is not None else self.zero_state(batch, inputs)
        weights = self._gate_weights()
        # (time, batch, 4 * cell_dim): each step reads one contiguous block.
        input_gates = self._input_gates(inputs.transpose(0, 1).contiguous(), weights)
        if self.forget_bias:
            input_gates[..., self.cell_dim : 2 * self.cell_dim] += self.forget_bias
        if not torch.is_grad_enabled():
            return self._run_in_place(input_gates, h, c, batch_sizes, weights)
        steps = []
        # unbind: one backward node for all steps (slicing step t out of the whole
        # tensor would make autograd allocate a full-size gradient once per step)
        for t, (step_gates, n) in enumerate(zip(input_gates.unbind(0), batch_sizes)):
            gates = self._add_recurrent_gates(step_gates[:n], h[:n], weights)
            h_t, c_t = self._step(gates, c[:n])
            steps.append(h_t)
            if n < batch:
                h, c = torch.cat([h_t, h[n:]]), torch.cat([c_t, c[n:]])
            else:
                h, c = h_t, c_t
        return _time_major(steps, batch_sizes, batch).transpose(0, 1), (h, c)

    def _run_in_place(
        self, input_gates: torch.Tensor, h: torch.Tensor, c: torch.Tensor, batch_sizes: List[int], weights: GateWeights
    ) -> Tuple[torch.Tensor, LSTMState]:
        """The time loop without autograd, writing outputs and state in place."""
        time, batch = input_gates.shape[:2]
        outputs = input_gates.new_zeros(time, batch, self.output_dim)
        h, c = h.clone(), c.clone()
        for t, n in enumerate(batch_sizes):
            gates = self._add_recurrent_gates(input_gates[t, :n], h[:n], weights)
            h_t, c_t = self._step_in_place(gates, c[:n])
            outputs[t, :n] = h_t
            h[:n], c[:n] = h_t, c_t
        return outputs.transpose(0, 1), (h, c)

    def _gate_weights(self) -> GateWeights:
        """Input weight, transposed recurrent weight and bias, with the candidate (g) rows
        doubled: one sigmoid then serves all four gates, tanh(g) = 2 * sigmoid(2g) - 1.
        Doubling is exact in floating point, and torch's CPU tanh is several times slower
        than its sigmoid."""
        scale = torch.ones(4 * self.cell_dim, dtype=self.bias.dtype, device=self.bias.device)
        scale[2 * self.cell_dim : 3 * self.cell_dim] = 2.0
        return self.input_weight * scale[:, None], (self.recurrent_weight * scale[:, None]).t(), self.bias * scale

    def _input_gates(self, inputs: torch.Tensor, weights: GateWeights) -> torch.Tensor:
        """(..., input_dim) -> (..., 4H): the input's share of the gates (g doubled), with the bias."""
        return torch.nn.functional.linear(inputs, weights[0], weights[2])

    def _add_recurrent_gates(self, input_gates: torch.Tensor, h: torch.Tensor, weights: GateWeights) -> torch.Tensor:
        """(n, 4H) + (n, output_dim) @ W_h^T -> (n, 4H), g doubled."""
        return torch.addmm(input_gates, h, weights[1])

    def _project(self, h: torch.Tensor) -> torch.Tensor:
        """(n, H) -> (n, P)"""
        assert self.projection is not None
        return h @ self.projection.t()

    def _step(self, gates: torch.Tensor, c: torch.Tensor) -> LSTMState:
        """One time step for n running rows: gates (n, 4H) with g doubled, cell (n, H)
        -> new (h, c). Differentiable."""
        i, f, g, o = torch.sigmoid(gates).chunk(4, dim=1)
        c = torch.addcmul(f * c - i, i, g, value=2.0)  # f * c + i * tanh(g)
        if self.cell_clip is not None:
            c = c.clamp(-self.cell_clip, self.cell_clip)
        h = torch.addcmul(-o, o, torch.sigmoid(2.0 * c), value=2.0)  # o * tanh(c)
        return self._clipped_projection(h), c

    def _step_in_place(self, gates: torch.Tensor, c: torch.Tensor) -> LSTMState:
        """`_step` for inference: the same arithmetic with fewer allocations (overwrites `gates`)."""
        i, f, g, o = gates.sigmoid_().chunk(4, dim=1)
        c = torch.mul(f, c).sub_(i).addcmul_(i, g, value=2.0)
        if self.cell_clip is not None:
            c.clamp_(-self.cell_clip, self.cell_clip)
        h = torch.mul(c, 2.0).sigmoid_().mul_(o).mul_(2.0).sub_(o)
        return self._clipped_projection(h), c

    def _clipped_projection(self, h: torch.Tensor) -> torch.Tensor:
        if self.projection is not None:
            h = self._project(h)
            if self.proj_clip is not None:
                h = h.clamp(-self.proj_clip, self.proj_clip)
        return h


def _time_major(steps: List[torch.Tensor], batch_sizes: List[int], batch: int) -> torch.Tensor:
    """Per-step outputs, step t (batch_sizes[t], P), -> (time, batch, P), zero past each row's
    end. One differentiable copy: writing each step into a slice of a preallocated tensor
    would make autograd clone the whole tensor once per step."""
    flat = torch.cat(steps)
    rows = torch.cat([torch.arange(n) + t * batch for t, n in enumerate(batch_sizes)]).to(flat.device)
    out = flat.new_zeros(len(batch_sizes) * batch, flat.shape[1]).index_copy(0, rows, flat)
    return out.view(len(batch_sizes), batch, flat.shape[1])
