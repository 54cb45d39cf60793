"""A unidirectional LSTM with cell clipping, output projection and projection clipping.

This is the cell of bilm-tf/AllenNLP ELMo. `nn.LSTM(proj_size=...)` cannot be used: it
has no clipping. The time loop runs over packed rows: batches are sorted by length,
longest first, so step t's running rows are the first `batch_sizes[t]`, and the rows of
all steps are stored one step after the other (as in a `PackedSequence`). The input
projection is one matrix product over all packed rows; the loop only does the recurrent
product and the gate arithmetic. In training, a hand-written backward pass through time
leaves the weight gradients to one matrix product each; under bf16 autocast the loop's
matrix products take bfloat16 operands while its state and gate arithmetic stay float32,
and the products over all packed rows run over a rounded row count (`shapes`).
`run_layers` trains several such layers over one packing (a biLM layer's two directions)
in one time loop: each step's products for all of them are one batched product. On a CPU
with float32 state, the training loops run compiled where they can be built
(`fused_loops`): the same arithmetic as the Python loops here, which define it.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn

from .fused_loops import fused_loops
from .shapes import product_rows, repeat_first_row

LSTMState = Tuple[torch.Tensor, torch.Tensor]
"""(h, c): h is (batch, output_dim), c is (batch, cell_dim)."""
GateWeights = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(input weight (4H, in), recurrent weight transposed (out, 4H), bias (4H,)), g rows doubled."""
# The training loop runs D layers at once (D = 1, or a biLM layer's two directions): its
# tensors have a leading dimension D, e.g. input gates (D, padded rows, 4H).


class ProjectedLSTM(nn.Module):
    """Gate order i, f, g, o (PyTorch's). As in TensorFlow's LSTMCell, a constant
    `forget_bias` is added to the forget gate on top of the learned `bias`."""

    differentiable = True
    """Whether, with autograd recording, the layer runs the differentiable training loop
    over its parameters (a subclass whose products are not differentiable, such as the
    int8 one, runs its inference loop whatever the grad mode)."""

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
        if torch.is_grad_enabled() and self.differentiable:
            return _run_in_one_loop([self], [inputs], batch_sizes, [state])[0]
        batch, time, _ = inputs.shape
        h, c = state if state is not None else self.zero_state(batch, inputs)
        weights = self._gate_weights()
        rows = packed_rows(batch_sizes, batch, inputs.device)
        input_gates = self._input_gates(_packed(inputs, rows), weights)
        packed, h, c = _run_time_loop(self, input_gates, h, c, batch_sizes, weights[1])
        return _unpacked(packed, rows, batch, time), (h, c)

    def _gate_weights(self) -> GateWeights:
        """Input weight, transposed recurrent weight and bias, with the candidate (g) rows
        doubled: one sigmoid then serves all four gates, tanh(g) = 2 * sigmoid(2g) - 1
        (doubling is exact in floating point). The bias includes the constant forget bias."""
        scale = torch.ones(4 * self.cell_dim, dtype=self.bias.dtype, device=self.bias.device)
        scale[2 * self.cell_dim : 3 * self.cell_dim] = 2.0
        constant = torch.zeros_like(scale)
        constant[self.cell_dim : 2 * self.cell_dim] = self.forget_bias
        return self.input_weight * scale[:, None], (self.recurrent_weight * scale[:, None]).t(), self.bias * scale + constant

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
        o, cell, tanh_cell = self._cell_update(gates, c)
        return self._clipped_projection(tanh_cell.mul_(o)), cell

    def _cell_update(
        self, gates: torch.Tensor, c: torch.Tensor, cells: Optional[torch.Tensor] = None, tanh_cells: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The gate arithmetic of one step: gates (..., n, 4H) with g doubled (overwritten
        by their sigmoids), previous cell (..., n, H) -> output gate o, new (clipped) cell
        and its tanh, each (..., n, H); the cell and its tanh are written into `cells` and
        `tanh_cells` when given."""
        i, f, g, o = gates.sigmoid_().chunk(4, dim=-1)
        cell = torch.mul(f, c, out=cells).sub_(i).addcmul_(i, g, value=2.0)
        if self.cell_clip is not None:
            cell.clamp_(-self.cell_clip, self.cell_clip)
        return o, cell, torch.tanh(cell, out=tanh_cells)

    def _clipped_projection(self, h: torch.Tensor) -> torch.Tensor:
        if self.projection is not None:
            h = self._project(h)
            if self.proj_clip is not None:
                h = h.clamp(-self.proj_clip, self.proj_clip)
        return h


def packed_rows(batch_sizes: List[int], batch: int, device: torch.device) -> torch.Tensor:
    """(sum(batch_sizes),) the time-major row (t * batch + r) of each packed row."""
    return torch.cat([torch.arange(n) + t * batch for t, n in enumerate(batch_sizes)]).to(device)


def _packed(inputs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(batch, time, dim) -> (len(rows), dim): the time-major rows `rows` of `inputs`."""
    batch, time, dim = inputs.shape
    return inputs.transpose(0, 1).reshape(time * batch, dim).index_select(0, rows)


def _unpacked(packed: torch.Tensor, rows: torch.Tensor, batch: int, time: int) -> torch.Tensor:
    """Packed (len(rows), dim) -> (batch, time, dim), zero past each row's length."""
    outputs = packed.new_zeros(time * batch, packed.shape[1]).index_copy(0, rows, packed)
    return outputs.view(time, batch, -1).transpose(0, 1)


def run_layers(
    layers: Sequence[ProjectedLSTM],
    inputs: Sequence[torch.Tensor],
    batch_sizes: List[int],
    states: Sequence[Optional[LSTMState]],
    weight_drop: float = 0.0,
) -> List[Tuple[torch.Tensor, LSTMState]]:
    """Each of `layers` (same shapes and clips) over its own input with the same packing,
    as `layer(inputs, batch_sizes, state)` each: with autograd recording (training) in
    one time loop whose products are batched over the layers (`_TrainingTimeLoop`), else
    one after the other. `weight_drop` (the training loop only) zeroes that share of each
    layer's recurrent weights, one mask for the whole batch and every step (DropConnect,
    as in Merity et al.'s AWD-LSTM), the rest scaled up to keep their expectation."""
    settings = {
        (type(layer), layer.input_dim, layer.cell_dim, layer.output_dim, layer.projection is None, layer.cell_clip, layer.proj_clip) for layer in layers
    }
    if len(settings) > 1:
        raise ValueError(f"layers run together need the same kind, shapes and clips, got {sorted(settings, key=str)}")
    if torch.is_grad_enabled() and layers[0].differentiable:
        return _run_in_one_loop(layers, inputs, batch_sizes, states, weight_drop)
    return [layer(x, batch_sizes, state) for layer, x, state in zip(layers, inputs, states)]


def _run_in_one_loop(
    layers: Sequence[ProjectedLSTM],
    inputs: Sequence[torch.Tensor],
    batch_sizes: List[int],
    states: Sequence[Optional[LSTMState]],
    weight_drop: float = 0.0,
) -> List[Tuple[torch.Tensor, LSTMState]]:
    """The differentiable pass of `run_layers`: the input products over a recurring row
    count (`shapes`), batched over the layers, then one `_TrainingTimeLoop`."""
    batch, time, _ = inputs[0].shape
    device = inputs[0].device
    rows = packed_rows(batch_sizes, batch, device)
    selected = repeat_first_row(rows, product_rows(len(rows), device))
    input_weights, recurrent_ts, biases = (torch.stack(weights) for weights in zip(*(layer._gate_weights() for layer in layers)))
    if weight_drop:
        recurrent_ts = nn.functional.dropout(recurrent_ts, weight_drop)
    packed_inputs = torch.stack([_packed(x, selected) for x in inputs])  # (D, padded rows, in)
    input_gates = torch.baddbmm(biases.unsqueeze(1), packed_inputs, input_weights.transpose(1, 2))  # (D, padded rows, 4H)
    projections: List[torch.Tensor] = [layer.projection for layer in layers if layer.projection is not None]  # all or none
    projection = torch.stack(projections) if projections else input_gates.new_empty(0)
    initial = [state if state is not None else layer.zero_state(batch, x) for layer, x, state in zip(layers, inputs, states)]
    h0, c0 = (torch.stack(parts) for parts in zip(*initial))
    packed, h, c = _TrainingTimeLoop.apply(layers[0], batch_sizes, input_gates, recurrent_ts, projection, h0, c0)
    return [(_unpacked(outputs, rows, batch, time), (final_h, final_c)) for outputs, final_h, final_c in zip(packed.unbind(0), h.unbind(0), c.unbind(0))]


def _step_offsets(batch_sizes: List[int]) -> List[int]:
    """Where each step's rows start among the packed rows."""
    offsets, total = [], 0
    for n in batch_sizes:
        offsets.append(total)
        total += n
    return offsets


class _Packing(NamedTuple):
    """Where each row of a longest-first batch lies among the packed rows."""

    batch_sizes: List[int]
    """For each step, how many rows are still running."""
    offsets: List[int]
    """Where each step's rows start among the packed rows."""
    previous: torch.Tensor
    """(rows,) each packed row's own row one step earlier, indexing [the first step's
    initial states; the packed rows]: row j of step 0 is j, of step t > 0 it is
    batch_sizes[0] + offsets[t - 1] + j."""
    last: torch.Tensor
    """(running,) the packed row of each running row's last step; rows >= running never run."""

    def step(self, t: int) -> slice:
        """The packed rows of step t."""
        return slice(self.offsets[t], self.offsets[t] + self.batch_sizes[t])

    @property
    def rows(self) -> int:
        """How many packed rows there are."""
        return sum(self.batch_sizes)


def _packing(batch_sizes: List[int], device: torch.device) -> _Packing:
    offsets = _step_offsets(batch_sizes)
    sizes = torch.tensor(batch_sizes, dtype=torch.long)
    starts = torch.tensor(offsets, dtype=torch.long)
    step = torch.repeat_interleave(torch.arange(len(batch_sizes)), sizes)  # (rows,) each packed row's step
    row = torch.arange(len(step)) - starts[step]  # (rows,) its row in the batch
    previous = torch.where(step > 0, sizes[0] + starts[(step - 1).clamp_min(0)] + row, row)
    first_rows = torch.arange(batch_sizes[0] if batch_sizes else 0)
    steps_run = (sizes.unsqueeze(0) > first_rows.unsqueeze(1)).sum(1)  # (running,) each row's length
    last = starts[steps_run - 1] + first_rows
    return _Packing(batch_sizes, offsets, previous.to(device), last.to(device))


class _Record(NamedTuple):
    """What the backward pass of a time loop needs besides its outputs (packed rows)."""

    sigmoids: torch.Tensor  # (D, rows, 4H): sigmoid of each step's gates, g doubled
    cells: torch.Tensor  # (D, rows, H): each step's cell state, after clipping
    tanh_cells: torch.Tensor  # (D, rows, H): tanh of the cells
    unprojected: torch.Tensor  # (D, padded rows, H) o * tanh(c), the projection's input, in the products' dtype, zero past the rows; empty without projection


def _run_time_loop(
    layer: ProjectedLSTM,
    input_gates: torch.Tensor,
    h: torch.Tensor,
    c: torch.Tensor,
    batch_sizes: List[int],
    recurrent_t: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inference time loop: packed input_gates (rows, 4H), initial h (batch, P) and
    c (batch, H) -> packed outputs (rows, P) and the final (h, c) of each row."""
    outputs = input_gates.new_empty(len(input_gates), layer.output_dim)
    h, c = h.clone(), c.clone()
    for offset, n in zip(_step_offsets(batch_sizes), batch_sizes):
        step = slice(offset, offset + n)
        gates = layer._add_recurrent_gates(input_gates[step], h[:n], recurrent_t)
        h_t, c_t = layer._step_in_place(gates, c[:n])
        outputs[step] = h_t
        h[:n], c[:n] = h_t, c_t
    return outputs, h, c


def _empty_record(layer: ProjectedLSTM, input_gates: torch.Tensor, packing: _Packing, projection_t: torch.Tensor) -> Tuple[torch.Tensor, _Record]:
    """The packed outputs (D, rows, P) and the record a training time loop fills in (the
    projection inputs in the products' dtype, `projection_t`'s, their padding rows zeroed)."""
    directions, padded, gate_dim = input_gates.shape
    rows = packing.rows
    cell_dim = gate_dim // 4
    record = _Record(
        input_gates.new_empty(directions, rows, gate_dim),
        input_gates.new_empty(directions, rows, cell_dim),
        input_gates.new_empty(directions, rows, cell_dim),
        input_gates.new_empty(directions, padded if projection_t.numel() > 0 else 0, cell_dim, dtype=projection_t.dtype),
    )
    record.unprojected[:, rows:].zero_()
    return input_gates.new_empty(directions, rows, layer.output_dim), record


def _fused_record_time_loop(
    layer: ProjectedLSTM,
    input_gates: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    packing: _Packing,
    recurrent_t: torch.Tensor,
    projection_t: torch.Tensor,
) -> Tuple[torch.Tensor, _Record]:
    """`_record_time_loop` as one call of the compiled loop (`fused_loops`), float32 only."""
    fused = fused_loops()
    assert fused is not None
    outputs, record = _empty_record(layer, input_gates, packing, projection_t)
    proj_clip = layer.proj_clip if projection_t.numel() > 0 else None
    fused.record_loop(
        input_gates.contiguous(),
        h0.contiguous(),
        c0.contiguous(),
        recurrent_t,
        projection_t,
        packing.batch_sizes,
        layer.cell_clip,
        proj_clip,
        outputs,
        *record,
    )
    return outputs, record


def _record_time_loop(
    layer: ProjectedLSTM,
    input_gates: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    packing: _Packing,
    recurrent_t: torch.Tensor,
    projection_t: torch.Tensor,
) -> Tuple[torch.Tensor, _Record]:
    """The training time loop of D layers at once: the inference loop's gate arithmetic
    (`_cell_update`), with every step's state written once into the record (no state
    copies). Gates, cells and outputs are in the dtype of `input_gates`; the recurrent and
    projection products take the weights' dtype (bfloat16 under autocast, else the same
    dtype). Packed input_gates (D, padded rows, 4H), h0 (D, batch, P), c0 (D, batch, H),
    recurrent_t (D, P, 4H), projection_t (D, H, P) or empty -> packed outputs (D, rows, P)
    and the record."""
    outputs, record = _empty_record(layer, input_gates, packing, projection_t)
    projected = projection_t.numel() > 0
    product_dtype = recurrent_t.dtype
    low = product_dtype != input_gates.dtype
    h_previous = h0.to(product_dtype)
    for t, n in enumerate(packing.batch_sizes):
        step = packing.step(t)
        c_previous = c0[:, :n] if t == 0 else record.cells[:, packing.step(t - 1)][:, :n]
        gates = record.sigmoids[:, step]
        if low:  # a bf16 product copied into the fp32 gates, then the input gates added: the
            # same sums as a mixed-dtype add, which runs at half the speed
            gates.copy_(torch.bmm(h_previous[:, :n], recurrent_t)).add_(input_gates[:, step])
        else:
            torch.baddbmm(input_gates[:, step], h_previous[:, :n], recurrent_t, out=gates)
        o, _, tanh_cell = layer._cell_update(gates, c_previous, record.cells[:, step], record.tanh_cells[:, step])
        if not projected:
            h_previous = torch.mul(o, tanh_cell, out=outputs[:, step]).to(product_dtype)
            continue
        unprojected = torch.mul(o, tanh_cell, out=record.unprojected[:, step])
        if low:
            outputs[:, step] = torch.bmm(unprojected, projection_t)
        else:
            torch.bmm(unprojected, projection_t, out=outputs[:, step])
        if layer.proj_clip is not None:  # in the outputs' dtype: a bf16 bound would be rounded
            outputs[:, step].clamp_(-layer.proj_clip, layer.proj_clip)
        h_previous = outputs[:, step].to(product_dtype)
    return outputs, record


def _final_state(packed: torch.Tensor, initial: torch.Tensor, packing: _Packing) -> torch.Tensor:
    """(D, batch, dim): each row's value at its last step, its initial value if it never ran."""
    final = initial.clone()
    final[:, : len(packing.last)] = packed.index_select(1, packing.last)
    return final


class _TrainingTimeLoop(torch.autograd.Function):
    """The differentiable time loop of D `ProjectedLSTM`s of the same shapes and clips over
    one packing (D = 1, or a biLM layer's two directions), with a hand-written backward
    pass through time. Every product of a step is one batched product over the D layers
    (two directions: 0.66x the time of two products for the recurrent one in bf16).

    The forward pass records each step's gate sigmoids, cells and their tanh. The backward
    pass first computes, over all packed rows at once, every factor that does not depend
    on the incoming gradient (the gates' derivatives times what multiplies them, the
    clipping masks), so that its per-step recurrence is seven operations (the compiled
    loop, `fused_loops`, computes them inside its one pass per step); the weight
    gradients are one matrix product each over all packed rows. Gate arithmetic and state
    run in float32 (float64 for float64 inputs); under bf16 autocast, whose input gates
    arrive in bfloat16, the recurrent and projection products take bfloat16 operands (bf16
    matrix products are 2-4x faster where the CPU has AVX512-BF16 or AMX). Tested against
    autograd through a naive cell and against finite differences."""

    @staticmethod
    def forward(ctx, layer, batch_sizes, input_gates, recurrent_t, projection, h, c):
        """Packed input_gates (D, padded rows, 4H: rows past sum(batch_sizes) are ignored
        and get zero gradients), recurrent_t (D, P, 4H), projection (D, P, H) or empty,
        h (D, batch, P), c (D, batch, H) -> packed outputs (D, rows, P), final h, final c.
        `layer` gives the clips. The weight gradients run over the padded rows, so their
        shapes recur from batch to batch (`shapes`)."""
        ctx.dtypes = [t.dtype for t in (input_gates, recurrent_t, projection, h, c)]
        dtype = torch.promote_types(input_gates.dtype, torch.float32)
        product_dtype = torch.bfloat16 if input_gates.dtype == torch.bfloat16 else dtype
        input_gates, recurrent_t, projection, h, c = (t.to(dtype) for t in (input_gates, recurrent_t, projection, h, c))
        packing = _packing(batch_sizes, input_gates.device)
        ctx.fused = dtype == torch.float32 and input_gates.device.type == "cpu" and fused_loops() is not None
        with torch.autocast(input_gates.device.type, enabled=False):
            recurrent_low = recurrent_t.to(product_dtype).contiguous()  # the products' operands, for either loop
            projection_t = projection.transpose(1, 2).to(product_dtype).contiguous() if projection.numel() else projection.to(product_dtype)
            run_loop = _fused_record_time_loop if ctx.fused else _record_time_loop
            outputs, record = run_loop(layer, input_gates, h, c, packing, recurrent_low, projection_t)
        ctx.packing = packing
        ctx.padded_rows = input_gates.shape[1]
        ctx.product_dtype = product_dtype
        ctx.cell_clip = layer.cell_clip
        ctx.proj_clip = layer.proj_clip if projection.numel() else None
        ctx.save_for_backward(*record, outputs, recurrent_t, projection, h, c)
        return outputs, _final_state(outputs, h, packing), _final_state(record.cells, c, packing)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_outputs, d_h_final, d_c_final):
        sigmoids, cells, tanh_cells, unprojected, outputs, recurrent_t, projection, h0, c0 = ctx.saved_tensors
        packing, product_dtype = ctx.packing, ctx.product_dtype
        dtype = sigmoids.dtype
        projected = projection.numel() > 0
        running = len(packing.last)
        directions, rows, _ = cells.shape
        # d_y_all becomes, step by step, the gradient at each step's projection output
        # (recurrent gradient added, clipping mask applied): the projection's gradient.
        padded = ctx.padded_rows
        d_y_all = d_outputs.new_zeros(directions, padded, d_outputs.shape[2], dtype=dtype)
        d_y_all[:, :rows] = d_outputs
        d_y_all.index_add_(1, packing.last, d_h_final[:, :running].to(dtype))
        d_c = d_c_final.to(dtype, copy=True).contiguous()  # the gradient at each row's cell, times its clip mask
        if ctx.cell_clip is not None:
            d_c[:, :running].mul_(cells.index_select(1, packing.last).abs() < ctx.cell_clip)
        d_h0 = d_h_final.to(dtype, copy=True).contiguous()
        d_gates = sigmoids.new_empty(directions, padded, sigmoids.shape[2], dtype=product_dtype)
        d_gates[:, rows:].zero_()
        recurrent = recurrent_t.transpose(1, 2).to(product_dtype)
        projection_low = projection.to(product_dtype)
        if ctx.fused:
            fused = fused_loops()
            assert fused is not None
            fused.backward_loop(
                d_y_all,
                d_c,
                d_h0,
                d_gates,
                sigmoids,
                cells,
                tanh_cells,
                outputs,
                c0.contiguous(),
                recurrent.contiguous(),
                projection_low,
                packing.batch_sizes,
                ctx.cell_clip,
                ctx.proj_clip,
            )
        else:
            _backward_time_loop(
                d_y_all, d_c, d_h0, d_gates, sigmoids, cells, tanh_cells, outputs, c0, recurrent, projection_low, packing, ctx.cell_clip, ctx.proj_clip
            )
        previous_h = d_gates.new_zeros(directions, padded, outputs.shape[2])
        previous_h[:, :rows] = torch.cat([h0[:, : packing.batch_sizes[0]], outputs], dim=1).index_select(1, packing.previous)
        d_recurrent = torch.bmm(previous_h.transpose(1, 2), d_gates)
        d_projection = torch.bmm(d_y_all.to(product_dtype).transpose(1, 2), unprojected) if projected else None
        grads = [d_gates, d_recurrent, d_projection, d_h0, d_c]
        grads = [grad.to(wanted) if grad is not None else None for grad, wanted in zip(grads, ctx.dtypes)]
        return (None, None, *(grad if need else None for grad, need in zip(grads, ctx.needs_input_grad[2:])))


def _backward_time_loop(
    d_y_all: torch.Tensor,
    d_c: torch.Tensor,
    d_h0: torch.Tensor,
    d_gates: torch.Tensor,
    sigmoids: torch.Tensor,
    cells: torch.Tensor,
    tanh_cells: torch.Tensor,
    outputs: torch.Tensor,
    c0: torch.Tensor,
    recurrent: torch.Tensor,
    projection: torch.Tensor,
    packing: _Packing,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
) -> None:
    """The backward pass through time of a recorded loop, in place: d_y_all (D, padded rows,
    P), the gradient at each step's outputs, gets the projection clip's mask and the
    recurrent gradients; d_c (D, batch, H) and d_h0 (D, batch, P) become the initial
    state's gradients, d_gates (D, padded rows, 4H) the gate pre-activations'. recurrent
    (D, 4H, P) and projection (D, P, H) or empty are in the products' dtype."""
    directions, _, cell_dim = cells.shape
    low = d_gates.dtype != d_y_all.dtype
    projected = projection.numel() > 0
    factors = _gradient_factors(sigmoids, cells, tanh_cells, c0, packing, cell_clip)
    if proj_clip is not None:
        output_mask = outputs.abs() < proj_clip
    for t in reversed(range(len(packing.batch_sizes))):
        n = packing.batch_sizes[t]
        step = packing.step(t)
        d_y = d_y_all[:, step]
        if proj_clip is not None:
            d_y.mul_(output_mask[:, step])
        d_unprojected = torch.bmm(d_y.to(d_gates.dtype), projection) if projected else d_y
        d_cell = torch.addcmul(d_c[:, :n], d_unprojected, factors.cell[:, step])
        d_step = d_gates[:, step].view(directions, n, 4, cell_dim)
        torch.mul(factors.gates[:, step].view(directions, n, 4, cell_dim)[:, :, :3], d_cell.unsqueeze(2), out=d_step[:, :, :3])
        torch.mul(factors.gates[:, step, 3 * cell_dim :], d_unprojected, out=d_step[:, :, 3])
        if t:
            previous = d_y_all[:, packing.step(t - 1)][:, :n]
            if low:
                previous.add_(torch.bmm(d_gates[:, step], recurrent))
            else:
                previous.baddbmm_(d_gates[:, step], recurrent)
        else:
            d_h0[:, :n] = torch.bmm(d_gates[:, step], recurrent)
        torch.mul(d_cell, factors.carry[:, step], out=d_c[:, :n])


class _GradientFactors(NamedTuple):
    """Per packed row, what the backward pass multiplies the incoming gradient by."""

    gates: torch.Tensor
    """(D, rows, 4H): d gate pre-activation / d cell before clipping for i, f, g, and
    d gate pre-activation / d (o * tanh c) for o."""
    cell: torch.Tensor
    """(D, rows, H): d cell / d (o * tanh c) = o * (1 - tanh^2 c), times the clip mask."""
    carry: torch.Tensor
    """(D, rows, H): d previous cell / d cell = f, times the previous cell's clip mask."""


def _gradient_factors(
    sigmoids: torch.Tensor, cells: torch.Tensor, tanh_cells: torch.Tensor, c0: torch.Tensor, packing: _Packing, cell_clip: Optional[float]
) -> _GradientFactors:
    """The gradient factors of a recorded time loop, computed over all packed rows at once.

    With c' = f * c_prev + i * tanh(g) clipped to c, and u = o * tanh(c):
    dc'/di = tanh(g), dc'/df = c_prev, dc'/dg = i, du/do = tanh(c), times each gate's
    sigmoid derivative s (1 - s) (tanh(g) = 2 sigmoid(2g) - 1, whose pre-activation is
    stored doubled: its derivative is 2 s (1 - s))."""
    i, f, g, o = sigmoids.chunk(4, dim=-1)
    first_step = packing.batch_sizes[0]  # the rows of step 0, whose previous cell is c0
    c_previous = torch.cat([c0[:, :first_step], cells], dim=1).index_select(1, packing.previous)
    gates = torch.addcmul(sigmoids, sigmoids, sigmoids, value=-1.0)  # s (1 - s)
    d_i, d_f, d_g, d_o = gates.chunk(4, dim=-1)
    d_i.mul_(g.mul(2.0).sub_(1.0))
    d_f.mul_(c_previous)
    d_g.mul_(i).mul_(2.0)
    d_o.mul_(tanh_cells)
    cell = torch.addcmul(o, o, tanh_cells.square(), value=-1.0)
    carry = f.clone()
    if cell_clip is not None:
        mask = cells.abs() < cell_clip
        cell.mul_(mask)
        carry[:, first_step:].mul_(mask.index_select(1, packing.previous[first_step:] - first_step))
    return _GradientFactors(gates, cell, carry)
