"""A unidirectional LSTM with cell clipping, output projection and projection clipping.

This is the cell of bilm-tf/AllenNLP ELMo. `nn.LSTM(proj_size=...)` cannot be used: it
has no clipping. The time loop runs over packed rows: batches are sorted by length,
longest first, so step t's running rows are the first `batch_sizes[t]`, and the rows of
all steps are stored one step after the other (as in a `PackedSequence`). The input
projection is one matrix product over all packed rows; the loop only does the recurrent
product and the gate arithmetic. In training, a hand-written backward pass through time
leaves the weight gradients to one matrix product each.
"""

from typing import List, NamedTuple, Optional, Tuple

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

    def forward(self, inputs: torch.Tensor, batch_sizes: List[int], state: Optional[LSTMState] = None) -> Tuple[torch.Tensor, LSTMState]:
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
        rows = packed_rows(batch_sizes, batch, inputs.device)
        input_gates = self._input_gates(inputs.transpose(0, 1).reshape(time * batch, -1).index_select(0, rows), weights)
        if self.forget_bias:
            input_gates[:, self.cell_dim : 2 * self.cell_dim] += self.forget_bias
        if torch.is_grad_enabled():
            projection = self.projection if self.projection is not None else input_gates.new_empty(0)
            packed, h, c = _TrainingTimeLoop.apply(self, batch_sizes, input_gates, weights[1], projection, h, c)
        else:
            packed, h, c = _run_time_loop(self, input_gates, h, c, batch_sizes, weights[1])
        outputs = packed.new_zeros(time * batch, self.output_dim).index_copy(0, rows, packed)
        return outputs.view(time, batch, -1).transpose(0, 1), (h, c)

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

    def _add_recurrent_gates(self, input_gates: torch.Tensor, h: torch.Tensor, recurrent_t: torch.Tensor) -> torch.Tensor:
        """(n, 4H) + (n, output_dim) @ recurrent_t (output_dim, 4H) -> (n, 4H), g doubled."""
        return torch.addmm(input_gates, h, recurrent_t)

    def _project(self, h: torch.Tensor) -> torch.Tensor:
        """(n, H) -> (n, P)"""
        assert self.projection is not None
        return h @ self.projection.t()

    def _step_in_place(self, gates: torch.Tensor, c: torch.Tensor) -> LSTMState:
        """One time step for n running rows: gates (n, 4H) with g doubled (overwritten by
        their sigmoids), cell (n, H) -> new (h, c)."""
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


def packed_rows(batch_sizes: List[int], batch: int, device: torch.device) -> torch.Tensor:
    """(sum(batch_sizes),) the time-major row (t * batch + r) of each packed row."""
    return torch.cat([torch.arange(n) + t * batch for t, n in enumerate(batch_sizes)]).to(device)


def _step_offsets(batch_sizes: List[int]) -> List[int]:
    """Where each step's rows start among the packed rows."""
    offsets, total = [], 0
    for n in batch_sizes:
        offsets.append(total)
        total += n
    return offsets


class _Record(NamedTuple):
    """What the backward pass of a time loop needs besides its outputs (packed rows)."""

    sigmoids: torch.Tensor  # (rows, 4H): sigmoid of each step's gates, g doubled
    cells: torch.Tensor  # (rows, H): each step's cell state, after clipping


def _run_time_loop(
    layer: ProjectedLSTM,
    input_gates: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    batch_sizes: List[int],
    recurrent_t: torch.Tensor,
    record: Optional[_Record] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The time loop without autograd: packed input_gates (rows, 4H), initial h (batch, P)
    and c (batch, H) -> packed outputs (rows, P) and the final (h, c) of each row. Fills
    `record` for `_TrainingTimeLoop.backward` when given."""
    outputs = input_gates.new_empty(len(input_gates), layer.output_dim)
    h, c = h.clone(), c.clone()
    for offset, n in zip(_step_offsets(batch_sizes), batch_sizes):
        step = slice(offset, offset + n)
        if record is None:
            gates = layer._add_recurrent_gates(input_gates[step], h[:n], recurrent_t)
        else:  # the sigmoids are computed in place, in the record
            gates = torch.addmm(input_gates[step], h[:n], recurrent_t, out=record.sigmoids[step])
        h_t, c_t = layer._step_in_place(gates, c[:n])
        outputs[step] = h_t
        h[:n], c[:n] = h_t, c_t
        if record is not None:
            record.cells[step] = c_t
    return outputs, h, c


class _TrainingTimeLoop(torch.autograd.Function):
    """The differentiable time loop of a `ProjectedLSTM`, with a hand-written backward
    pass through time: the forward pass is the inference loop keeping each step's gate
    sigmoids and cells, the backward pass does only the per-step recurrence and leaves the
    weight gradients to one matrix product each over all packed rows. Runs in float32
    (under bf16 autocast too; float64 for float64 inputs); tested against autograd through
    a naive cell and against finite differences."""

    @staticmethod
    def forward(ctx, layer, batch_sizes, input_gates, recurrent_t, projection, h, c):
        """Packed input_gates (rows, 4H), recurrent_t (P, 4H), projection (P, H) or empty,
        h (batch, P), c (batch, H) -> packed outputs (rows, P), final h, final c."""
        ctx.dtypes = [t.dtype for t in (input_gates, recurrent_t, projection, h, c)]
        dtype = torch.promote_types(input_gates.dtype, torch.float32)
        input_gates, recurrent_t, projection, h, c = (t.to(dtype) for t in (input_gates, recurrent_t, projection, h, c))
        rows, gate_dim = input_gates.shape
        record = _Record(input_gates.new_empty(rows, gate_dim), input_gates.new_empty(rows, gate_dim // 4))
        with torch.autocast(input_gates.device.type, enabled=False):
            outputs, h_final, c_final = _run_time_loop(layer, input_gates, h, c, batch_sizes, recurrent_t, record)
        ctx.batch_sizes = batch_sizes
        ctx.cell_clip = layer.cell_clip
        ctx.proj_clip = layer.proj_clip if layer.projection is not None else None
        ctx.save_for_backward(record.sigmoids, record.cells, outputs, recurrent_t, projection, h, c)
        return outputs, h_final, c_final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_outputs, d_h_final, d_c_final):
        sigmoids, cells, outputs, recurrent_t, projection, h0, c0 = ctx.saved_tensors
        batch_sizes = ctx.batch_sizes
        offsets = _step_offsets(batch_sizes)
        dtype = sigmoids.dtype
        d_outputs, d_h, d_c = d_outputs.to(dtype), d_h_final.to(dtype, copy=True), d_c_final.to(dtype, copy=True)
        d_gates = torch.empty_like(sigmoids)
        projected = projection.numel() > 0
        if projected:
            d_projected = torch.empty_like(outputs)  # each step's gradient at the projection's output
            unprojected = torch.empty_like(cells)  # o * tanh(c), the projection's input
        for t in reversed(range(len(batch_sizes))):
            n = batch_sizes[t]
            step = slice(offsets[t], offsets[t] + n)
            d_y = d_outputs[step] + d_h[:n]
            if ctx.proj_clip is not None:
                d_y.mul_(outputs[step].abs() < ctx.proj_clip)
            i, f, g, o = sigmoids[step].chunk(4, dim=1)
            cell = cells[step]
            tanh_cell = torch.sigmoid(2.0 * cell).mul_(2.0).sub_(1.0)
            if projected:
                d_projected[step] = d_y
                torch.mul(o, tanh_cell, out=unprojected[step])
                d_y = d_y @ projection
            d_cell = (1.0 - tanh_cell * tanh_cell).mul_(o).mul_(d_y).add_(d_c[:n])
            if ctx.cell_clip is not None:
                d_cell.mul_(cell.abs() < ctx.cell_clip)
            previous_cell = cells[offsets[t - 1] : offsets[t - 1] + n] if t else c0[:n]
            d_i, d_f, d_g, d_o = d_gates[step].chunk(4, dim=1)
            torch.mul(d_cell, 2.0 * g - 1.0, out=d_i).mul_(i * (1.0 - i))
            torch.mul(d_cell, previous_cell, out=d_f).mul_(f * (1.0 - f))
            torch.mul(d_cell, i, out=d_g).mul_(2.0 * g * (1.0 - g))  # tanh(x) = 2 sigmoid(2x) - 1, 2x stored
            torch.mul(d_y, tanh_cell, out=d_o).mul_(o * (1.0 - o))
            d_h[:n] = d_gates[step] @ recurrent_t.t()
            d_c[:n] = d_cell.mul_(f)
        previous_h = torch.cat([h0[: batch_sizes[0]]] + [outputs[offsets[t - 1] : offsets[t - 1] + n] for t, n in enumerate(batch_sizes) if t])
        d_recurrent = previous_h.t() @ d_gates
        d_projection = d_projected.t() @ unprojected if projected else None
        grads = [d_gates, d_recurrent, d_projection, d_h, d_c]
        grads = [grad.to(wanted) if grad is not None else None for grad, wanted in zip(grads, ctx.dtypes)]
        return (None, None, *(grad if need else None for grad, need in zip(grads, ctx.needs_input_grad[2:])))
