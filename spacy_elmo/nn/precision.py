"""Opt-in approximate inference: bfloat16 matrix products, or int8 dynamic quantization.

Exact fp32 is the default. `bf16` runs matrix products and convolutions in bfloat16
under autocast (on CPUs with AMX/AVX512-BF16 and on GPUs); the LSTM state and the clipping
stay in float32. `int8` (CPU only) quantizes every LSTM, highway and projection weight
per output channel and the activations dynamically per call; the char-CNN (or word table) stays fp32.
Because activation scales are set per call, int8 vectors depend slightly on the rest of
the batch: only fp32 and bf16 keep the determinism contract.
"""

import contextlib
import copy
import warnings
from typing import ContextManager, Literal, Tuple, cast, get_args

import torch
from torch import nn

from .bilm import BiLM
from .lstm import GateWeights, ProjectedLSTM
from .token_encoder import TokenEncoder

Precision = Literal["fp32", "bf16", "int8"]
PRECISIONS: Tuple[str, ...] = get_args(Precision)


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bfloat16 matrix products run natively on `device`: any GPU torch can use in
    bf16, or a CPU with AVX512-BF16 or AMX tiles (elsewhere bf16 is emulated, slower than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def check_precision(precision: str, device: torch.device) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "int8" and device.type != "cpu":
        raise ValueError("precision 'int8' runs on the CPU only; use 'bf16' on a GPU")


def precision_context(precision: str, device: torch.device) -> ContextManager:
    """What to run the biLM under: autocast for bf16, nothing otherwise."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def runtime_bilm(bilm: BiLM, precision: str) -> BiLM:
    """The module to run: `bilm` itself, a bfloat16 copy (so that autocast has no weight to
    cast at every step), or an int8-quantized copy (inference only)."""
    if precision == "fp32":
        return bilm
    if precision == "bf16":
        half = copy.deepcopy(bilm).to(torch.bfloat16).eval()
        if half.config.warm_state:  # the LSTM state stays float32
            half.warm_h, half.warm_c = half.warm_h.float(), half.warm_c.float()
        return half
    quantized = copy.deepcopy(bilm).eval()
    for stack in (quantized.forward_stack, quantized.backward_stack):
        for index, layer in enumerate(stack.layers):
            stack.layers[index] = Int8ProjectedLSTM(cast(ProjectedLSTM, layer))
    encoder = quantized.token_encoder
    if isinstance(encoder, TokenEncoder):  # a word table is a lookup: nothing to quantize
        encoder.highways = cast(nn.ModuleList, _quantize_linears(encoder.highways))
        if encoder.projection is not None:
            encoder.projection = cast(nn.Linear, _int8_linear(encoder.projection.weight, encoder.projection.bias))
    return quantized


def _int8_linear(weight: torch.Tensor, bias: "torch.Tensor | None") -> nn.Module:
    """A dynamically quantized `x @ weight.T + bias`."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return cast(nn.Sequential, _quantize_linears(nn.Sequential(linear)))[0]


def _quantize_linears(module: nn.Module) -> nn.Module:
    """Every nn.Linear in `module` as int8 weights per output channel, dynamic int8 activations."""
    spec = {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}
    with warnings.catch_warnings():
        # torch.ao's dynamic quantization is deprecated upstream but present in every
        # torch 2 release to date (2.1 to 2.14).
        warnings.filterwarnings("ignore", message=".*(quantize_per|torch.ao.quantization).*deprecated")
        return torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)


class Int8ProjectedLSTM(ProjectedLSTM):
    """A `ProjectedLSTM` whose three matrix products run in int8; gates, clipping and state in fp32."""

    differentiable = False

    def __init__(self, layer: ProjectedLSTM) -> None:
        projection_dim = layer.output_dim if layer.projection is not None else None
        super().__init__(layer.input_dim, layer.cell_dim, projection_dim, layer.cell_clip, layer.proj_clip, layer.forget_bias)
        self.load_state_dict(layer.state_dict())
        input_weight, recurrent_weight_t, bias = layer._gate_weights()
        self.int8_input = _int8_linear(input_weight, bias)
        self.int8_recurrent = _int8_linear(recurrent_weight_t.t(), None)
        self.int8_projection = _int8_linear(layer.projection, None) if layer.projection is not None else None

    def _input_gates(self, inputs: torch.Tensor, weights: GateWeights) -> torch.Tensor:
        return self.int8_input(inputs.contiguous())

    def _add_recurrent_gates(self, input_gates: torch.Tensor, h: torch.Tensor, recurrent_t: torch.Tensor) -> torch.Tensor:
        return input_gates + self.int8_recurrent(h.contiguous())

    def _project(self, h: torch.Tensor) -> torch.Tensor:
        assert self.int8_projection is not None
        return self.int8_projection(h)
