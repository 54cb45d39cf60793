// The per-row gate arithmetic of spacy_elmo's projected LSTM (nn/lstm.py), one time step
// of one row: plain loops over the H cells that the compiler vectorizes (no torch types).
// P is the matrix products' operand type: float, or bfloat16 stored as its 16 bits.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lstm_rows {

using bfloat16_bits = uint16_t;

inline float widen(float value) { return value; }

inline float widen(bfloat16_bits value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

template <typename P>
inline P narrow(float value);

template <>
inline float narrow<float>(float value) {
  return value;
}

// Round to nearest even, as PyTorch's float -> bfloat16 (NaN aside: training has stopped
// making sense by then).
template <>
inline bfloat16_bits narrow<bfloat16_bits>(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<bfloat16_bits>(bits >> 16);
}

inline float clamp(float value, float bound) { return value < -bound ? -bound : (value > bound ? bound : value); }

// exp(x) with x clamped to [-87, 88] (all that sigmoid and tanh need, and no overflow): 2^n
// e^r, r in [-ln 2 / 2, ln 2 / 2], e^r by Cephes' degree-6 polynomial (within 2 ulp).
// Plain arithmetic, so the loops vectorize without a vector math library or fast-math
// flags (whose reciprocal estimates turn 1 / (1 + inf) into NaN).
inline float exp_clamped(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = std::floor(x * kLog2e + 0.5f);
  const float r = (x - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  return p * scale;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_clamped(-x)); }

// tanh(x) = 2 sigmoid(2x) - 1: one exp (absolute error about 1e-7).
inline float tanh_from_sigmoid(float x) { return 2.0f * sigmoid(2.0f * x) - 1.0f; }

// A clip's bound, or no bound.
inline float bound_or_none(bool clip, double bound) { return clip ? static_cast<float>(bound) : FLT_MAX; }

// Forward: gate pre-activations (the product `recurrent`, plus `input_gates` and bias; the
// g gate doubled) and the previous cell (H) -> the four gates' sigmoids (4H, order i f g o),
// the clipped cell, its tanh, and o * tanh(cell) in P (`low`).
template <typename P>
void forward_row(int64_t H, const float* __restrict input_gates, const P* __restrict recurrent, const float* __restrict previous_cell,
                 float* __restrict sigmoids, float* __restrict cell, float* __restrict tanh_cell, P* __restrict low, float cell_bound) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = sigmoid(widen(recurrent[j]) + input_gates[j]);
    const float f = sigmoid(widen(recurrent[H + j]) + input_gates[H + j]);
    const float g = sigmoid(widen(recurrent[2 * H + j]) + input_gates[2 * H + j]);
    const float o = sigmoid(widen(recurrent[3 * H + j]) + input_gates[3 * H + j]);
    sigmoids[j] = i;
    sigmoids[H + j] = f;
    sigmoids[2 * H + j] = g;
    sigmoids[3 * H + j] = o;
    const float c = clamp(f * previous_cell[j] - i + 2.0f * i * g, cell_bound);  // f c + i tanh(g)
    const float t = tanh_from_sigmoid(c);
    cell[j] = c;
    tanh_cell[j] = t;
    low[j] = narrow<P>(o * t);
  }
}

// o * tanh(cell) in float, for a layer without projection (its output).
inline void unprojected_row(int64_t H, const float* __restrict sigmoids, const float* __restrict tanh_cell, float* __restrict out) {
  for (int64_t j = 0; j < H; ++j) out[j] = sigmoids[3 * H + j] * tanh_cell[j];
}

// The projection's output (width) -> clipped into `out`, and in P into `low`.
template <typename P>
void projection_row(int64_t width, const P* __restrict projected, float* __restrict out, P* __restrict low, float bound) {
  for (int64_t k = 0; k < width; ++k) {
    const float value = clamp(widen(projected[k]), bound);
    out[k] = value;
    low[k] = narrow<P>(value);
  }
}

// Backward: the gradient at a row's outputs, zero where the projection was clipped, in
// place and in P.
template <typename P>
void mask_row(int64_t width, float* __restrict grad, const float* __restrict out, P* __restrict low, float bound) {
  for (int64_t k = 0; k < width; ++k) {
    const float value = std::fabs(out[k]) < bound ? grad[k] : 0.0f;
    grad[k] = value;
    low[k] = narrow<P>(value);
  }
}

// Backward gate arithmetic: the gradient at o * tanh(cell) (`d_unprojected`, in U) and the
// cell gradient carried from the next step (`d_cell_carried`, H, updated in place to the
// previous cell's) -> the gate pre-activations' gradients (4H, in P). The derivatives come
// from the recorded sigmoids, cell, tanh(cell) and previous cell; a clipped cell passes no
// gradient (`cell_bound`), nor does a clipped previous cell (`previous_bound`).
template <typename P, typename U>
void backward_row(int64_t H, const U* __restrict d_unprojected, const float* __restrict sigmoids, const float* __restrict cell,
                  const float* __restrict tanh_cell, const float* __restrict previous_cell, float* __restrict d_cell_carried,
                  P* __restrict d_gates, float cell_bound, float previous_bound) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = sigmoids[j], f = sigmoids[H + j], g = sigmoids[2 * H + j], o = sigmoids[3 * H + j];
    const float t = tanh_cell[j], c_previous = previous_cell[j];
    const float u = widen(d_unprojected[j]);
    const float cell_factor = std::fabs(cell[j]) < cell_bound ? o - o * t * t : 0.0f;
    const float d_cell = d_cell_carried[j] + u * cell_factor;
    d_gates[j] = narrow<P>((i - i * i) * (2.0f * g - 1.0f) * d_cell);
    d_gates[H + j] = narrow<P>((f - f * f) * c_previous * d_cell);
    d_gates[2 * H + j] = narrow<P>((g - g * g) * 2.0f * i * d_cell);
    d_gates[3 * H + j] = narrow<P>((o - o * o) * t * u);
    d_cell_carried[j] = std::fabs(c_previous) < previous_bound ? d_cell * f : 0.0f;
  }
}

// The recurrent product's gradient (width, in P): added to the previous step's output
// gradient, or, at the first step, written as the initial state's.
template <typename P>
void carry_row(int64_t width, const P* __restrict product, float* __restrict target, bool add) {
  if (add) {
    for (int64_t k = 0; k < width; ++k) target[k] += widen(product[k]);
  } else {
    for (int64_t k = 0; k < width; ++k) target[k] = widen(product[k]);
  }
}

}  // namespace lstm_rows
