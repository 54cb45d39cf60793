// The training time loops of spacy_elmo's projected LSTM (nn/lstm.py: _record_time_loop
// and the backward pass of _TrainingTimeLoop) in C++: each step is one batched product
// (two with a projection) and one pass of fused gate arithmetic per row (lstm_rows.h), in
// place of the dozen tensor operations a step takes in Python. D layers run at once (a
// biLM layer's two directions); rows are packed step after step, longest first. State and
// gate arithmetic are float32; the products take float32 or bfloat16 operands.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/python.h>

#include <cstdint>
#include <vector>

#include "lstm_rows.h"

namespace {

using at::Tensor;
using lstm_rows::bfloat16_bits;

constexpr int64_t kRowGrain = 4;  // rows per parallel task

struct Sizes {
  int64_t directions, padded, rows, batch, cell, out;  // D, padded rows, packed rows, B, H, P
};

std::vector<int64_t> step_offsets(const std::vector<int64_t>& batch_sizes) {
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (int64_t n : batch_sizes) {
    offsets.push_back(total);
    total += n;
  }
  return offsets;
}

// The first D * n * width elements of a flat buffer, as (D, n, width).
Tensor leading(const Tensor& buffer, int64_t directions, int64_t n, int64_t width) {
  return buffer.narrow(0, 0, directions * n * width).view({directions, n, width});
}

// A tensor's elements as T (bfloat16 as its bits).
template <typename T>
T* data(const Tensor& tensor) {
  return reinterpret_cast<T*>(tensor.data_ptr());
}

// fn(d, r) for every row r < n of every layer d, in parallel.
template <typename Fn>
void for_each_row(int64_t directions, int64_t n, const Fn& fn) {
  at::parallel_for(0, directions * n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) fn(index / n, index % n);
  });
}

template <typename P>
void record_loop_typed(const Tensor& input_gates, const Tensor& h0, const Tensor& c0, const Tensor& recurrent_t, const Tensor& projection_t,
                       const std::vector<int64_t>& batch_sizes, float cell_bound, float proj_bound, const Tensor& outputs,
                       const Tensor& sigmoids, const Tensor& cells, const Tensor& tanh_cells, const Tensor& unprojected) {
  const bool projected = projection_t.numel() > 0;
  const Sizes s{input_gates.size(0), input_gates.size(1), sigmoids.size(1), h0.size(1), cells.size(2), outputs.size(2)};
  const int64_t H = s.cell, G = 4 * s.cell;
  const auto options = recurrent_t.options();
  Tensor h_low = h0.to(recurrent_t.scalar_type(), /*non_blocking=*/false, /*copy=*/true).contiguous();  // overwritten step by step
  Tensor unprojected_low = projected ? unprojected : h_low;  // where o * tanh(cell) goes in P
  const int64_t low_rows = projected ? s.padded : s.batch;
  Tensor product = at::empty({s.directions * s.batch * G}, options);
  Tensor projection_out = at::empty({projected ? s.directions * s.batch * s.out : 0}, options);
  const float* ig = data<float>(input_gates);
  const float* initial_cells = data<float>(c0);
  float* sg = data<float>(sigmoids);
  float* cl = data<float>(cells);
  float* tc = data<float>(tanh_cells);
  float* out = data<float>(outputs);
  const std::vector<int64_t> offsets = step_offsets(batch_sizes);
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    const int64_t n = batch_sizes[t], offset = offsets[t], previous = t ? offsets[t - 1] : 0;
    Tensor step_product = leading(product, s.directions, n, G);
    at::bmm_out(step_product, h_low.narrow(1, 0, n), recurrent_t);
    const P* pr = data<P>(step_product);
    P* low = data<P>(unprojected_low);
    for_each_row(s.directions, n, [&](int64_t d, int64_t r) {
      const int64_t row = d * s.rows + offset + r;
      const float* previous_cell = t ? cl + (d * s.rows + previous + r) * H : initial_cells + (d * s.batch + r) * H;
      const int64_t low_row = projected ? d * low_rows + offset + r : d * low_rows + r;
      lstm_rows::forward_row<P>(H, ig + (d * s.padded + offset + r) * G, pr + (d * n + r) * G, previous_cell, sg + row * G, cl + row * H,
                                tc + row * H, low + low_row * H, cell_bound);
      if (!projected) lstm_rows::unprojected_row(H, sg + row * G, tc + row * H, out + row * H);
    });
    if (projected) {
      Tensor step_projection = leading(projection_out, s.directions, n, s.out);
      at::bmm_out(step_projection, unprojected.narrow(1, offset, n), projection_t);
      const P* projected_rows = data<P>(step_projection);
      P* h = data<P>(h_low);
      for_each_row(s.directions, n, [&](int64_t d, int64_t r) {
        lstm_rows::projection_row<P>(s.out, projected_rows + (d * n + r) * s.out, out + (d * s.rows + offset + r) * s.out,
                                     h + (d * s.batch + r) * s.out, proj_bound);
      });
    }
  }
}

template <typename P>
void backward_loop_typed(const Tensor& d_outputs, const Tensor& d_c, const Tensor& d_h0, const Tensor& d_gates, const Tensor& sigmoids,
                         const Tensor& cells, const Tensor& tanh_cells, const Tensor& outputs, const Tensor& c0, const Tensor& recurrent,
                         const Tensor& projection, const std::vector<int64_t>& batch_sizes, float cell_bound, float proj_bound) {
  const bool projected = projection.numel() > 0;
  const Sizes s{d_outputs.size(0), d_outputs.size(1), sigmoids.size(1), d_c.size(1), cells.size(2), d_outputs.size(2)};
  const int64_t H = s.cell, G = 4 * s.cell;
  const auto options = recurrent.options();
  Tensor d_low = at::empty({projected ? s.directions * s.batch * s.out : 0}, options);
  Tensor d_unprojected = at::empty({projected ? s.directions * s.batch * H : 0}, options);
  Tensor back = at::empty({s.directions * s.batch * s.out}, options);
  float* d_y = data<float>(d_outputs);
  float* d_cell = data<float>(d_c);
  float* d_initial = data<float>(d_h0);
  P* dg = data<P>(d_gates);
  const float* sg = data<float>(sigmoids);
  const float* cl = data<float>(cells);
  const float* tc = data<float>(tanh_cells);
  const float* out = data<float>(outputs);
  const float* initial_cells = data<float>(c0);
  const std::vector<int64_t> offsets = step_offsets(batch_sizes);
  for (int64_t t = static_cast<int64_t>(batch_sizes.size()) - 1; t >= 0; --t) {
    const int64_t n = batch_sizes[t], offset = offsets[t], previous = t ? offsets[t - 1] : 0;
    const float previous_bound = t ? cell_bound : FLT_MAX;  // the initial cell was not clipped
    auto cells_backward = [&](auto* d_unprojected_rows, int64_t d_unprojected_stride, int64_t d_unprojected_offset) {
      for_each_row(s.directions, n, [&](int64_t d, int64_t r) {
        const int64_t row = d * s.rows + offset + r;
        const float* previous_cell = t ? cl + (d * s.rows + previous + r) * H : initial_cells + (d * s.batch + r) * H;
        lstm_rows::backward_row(H, d_unprojected_rows + d * d_unprojected_stride + (d_unprojected_offset + r) * H, sg + row * G, cl + row * H,
                                tc + row * H, previous_cell, d_cell + (d * s.batch + r) * H, dg + (d * s.padded + offset + r) * G, cell_bound,
                                previous_bound);
      });
    };
    if (projected) {
      Tensor step_low = leading(d_low, s.directions, n, s.out);
      P* low = data<P>(step_low);
      for_each_row(s.directions, n, [&](int64_t d, int64_t r) {
        lstm_rows::mask_row<P>(s.out, d_y + (d * s.padded + offset + r) * s.out, out + (d * s.rows + offset + r) * s.out,
                               low + (d * n + r) * s.out, proj_bound);
      });
      Tensor step_unprojected = leading(d_unprojected, s.directions, n, H);
      at::bmm_out(step_unprojected, step_low, projection);
      cells_backward(static_cast<const P*>(data<P>(step_unprojected)), n * H, 0);
    } else {
      cells_backward(static_cast<const float*>(d_y), s.padded * H, offset);
    }
    Tensor step_back = leading(back, s.directions, n, s.out);
    at::bmm_out(step_back, d_gates.narrow(1, offset, n), recurrent);
    const P* back_rows = data<P>(step_back);
    for_each_row(s.directions, n, [&](int64_t d, int64_t r) {
      float* target = t ? d_y + (d * s.padded + previous + r) * s.out : d_initial + (d * s.batch + r) * s.out;
      lstm_rows::carry_row<P>(s.out, back_rows + (d * n + r) * s.out, target, t > 0);
    });
  }
}

void check_inputs(std::initializer_list<const Tensor*> tensors, const Tensor& state, const Tensor& product) {
  for (const Tensor* tensor : tensors) {
    TORCH_CHECK(tensor->is_contiguous(), "the fused LSTM loops take contiguous tensors");
    TORCH_CHECK(tensor->device().is_cpu(), "the fused LSTM loops run on the CPU");
  }
  TORCH_CHECK(state.scalar_type() == at::kFloat, "the fused LSTM loops keep their state in float32");
  TORCH_CHECK(product.scalar_type() == at::kFloat || product.scalar_type() == at::kBFloat16, "the fused LSTM loops take float32 or bfloat16 products");
}

}  // namespace

// _record_time_loop of nn/lstm.py: input_gates (D, padded rows, 4H), h0 (D, B, P), c0 (D, B,
// H), recurrent_t (D, P, 4H) and projection_t (D, H, P) or empty in the products' dtype ->
// outputs (D, rows, P), sigmoids (D, rows, 4H), cells and tanh_cells (D, rows, H) and
// unprojected (D, padded rows, H) in the products' dtype, or empty, written in place.
void record_loop(const Tensor& input_gates, const Tensor& h0, const Tensor& c0, const Tensor& recurrent_t, const Tensor& projection_t,
                 const std::vector<int64_t>& batch_sizes, c10::optional<double> cell_clip, c10::optional<double> proj_clip, Tensor outputs,
                 Tensor sigmoids, Tensor cells, Tensor tanh_cells, Tensor unprojected) {
  check_inputs({&input_gates, &h0, &c0, &recurrent_t, &projection_t, &outputs, &sigmoids, &cells, &tanh_cells, &unprojected}, input_gates,
               recurrent_t);
  const float cell_bound = lstm_rows::bound_or_none(cell_clip.has_value(), cell_clip.value_or(0.0));
  const float proj_bound = lstm_rows::bound_or_none(proj_clip.has_value(), proj_clip.value_or(0.0));
  if (recurrent_t.scalar_type() == at::kBFloat16) {
    record_loop_typed<bfloat16_bits>(input_gates, h0, c0, recurrent_t, projection_t, batch_sizes, cell_bound, proj_bound, outputs, sigmoids,
                                     cells, tanh_cells, unprojected);
  } else {
    record_loop_typed<float>(input_gates, h0, c0, recurrent_t, projection_t, batch_sizes, cell_bound, proj_bound, outputs, sigmoids, cells,
                             tanh_cells, unprojected);
  }
}

// The backward time loop of _TrainingTimeLoop (nn/lstm.py): d_outputs (D, padded rows, P),
// the gradient at each step's outputs, gets the projection clip's mask and the recurrent
// gradients; d_c (D, B, H) and d_h0 (D, B, P), the final state's gradients, become the
// initial state's; d_gates (D, padded rows, 4H), in the products' dtype, gets the gate
// pre-activations' gradients. recurrent (D, 4H, P), projection (D, P, H) or empty.
void backward_loop(Tensor d_outputs, Tensor d_c, Tensor d_h0, Tensor d_gates, const Tensor& sigmoids, const Tensor& cells,
                   const Tensor& tanh_cells, const Tensor& outputs, const Tensor& c0, const Tensor& recurrent, const Tensor& projection,
                   const std::vector<int64_t>& batch_sizes, c10::optional<double> cell_clip, c10::optional<double> proj_clip) {
  check_inputs({&d_outputs, &d_c, &d_h0, &d_gates, &sigmoids, &cells, &tanh_cells, &outputs, &c0, &recurrent, &projection}, sigmoids,
               recurrent);
  const float cell_bound = lstm_rows::bound_or_none(cell_clip.has_value(), cell_clip.value_or(0.0));
  const float proj_bound = lstm_rows::bound_or_none(proj_clip.has_value(), proj_clip.value_or(0.0));
  if (recurrent.scalar_type() == at::kBFloat16) {
    backward_loop_typed<bfloat16_bits>(d_outputs, d_c, d_h0, d_gates, sigmoids, cells, tanh_cells, outputs, c0, recurrent, projection, batch_sizes,
                                       cell_bound, proj_bound);
  } else {
    backward_loop_typed<float>(d_outputs, d_c, d_h0, d_gates, sigmoids, cells, tanh_cells, outputs, c0, recurrent, projection, batch_sizes,
                               cell_bound, proj_bound);
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("record_loop", &record_loop, "The training forward time loop (nn/lstm.py: _record_time_loop)");
  module.def("backward_loop", &backward_loop, "The backward time loop (nn/lstm.py: _TrainingTimeLoop.backward)");
}
