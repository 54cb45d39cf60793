"""The ELMo bidirectional language model: token encoder plus two separate LSTM stacks.

The forward and backward stacks never see each other: a bidirectional multi-layer
`nn.LSTM` would leak the future into the forward LM's upper layers.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy
import torch
from torch import nn

from .config import BiLMConfig
from .lstm import LSTMState, ProjectedLSTM, run_layers
from .token_encoder import TokenEncoder
from .word_encoder import WordEncoder

BiLMState = List[List[LSTMState]]
"""state[direction][layer] = (h, c); direction 0 is forward, 1 is backward."""


class BiLMOutput(NamedTuple):
    layers: torch.Tensor
    """(n_layers + 1, batch, time, 2P): layer 0 is the token encoding duplicated,
    layer j is [forward_j; backward_j]. Sentence boundaries removed, zero past each length."""
    mask: torch.Tensor
    """(batch, time) bool, True where a token is."""
    state: BiLMState
    """Final LSTM state of each row, in input row order."""


class _StackRun(NamedTuple):
    """Both stacks run over framed, length-sorted rows (position 0 is <S>)."""

    framed: torch.Tensor  # (batch, time + 2, P) token encodings
    forward_layers: List[torch.Tensor]  # n_layers x (batch, time + 2, P)
    backward_layers: List[torch.Tensor]  # n_layers x (batch, time + 2, P), un-reversed
    final_state: BiLMState  # in input row order
    restore: torch.Tensor  # (batch,) sorted position of each input row
    sorted_lengths: torch.Tensor  # (batch,) token counts, sorted


class LSTMStack(nn.Module):
    """`n_layers` projected LSTMs in one direction, residual from the second layer on."""

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        projection = config.projection_dim if config.projection_dim != config.lstm_dim else None
        self.layers = nn.ModuleList(
            ProjectedLSTM(config.projection_dim, config.lstm_dim, projection, config.cell_clip, config.proj_clip) for _ in range(config.n_layers)
        )
        self.use_skip_connections = config.use_skip_connections

    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: List[int],
        state: Optional[List[LSTMState]] = None,
        dropout: float = 0.0,
        weight_drop: float = 0.0,
    ) -> Tuple[List[torch.Tensor], List[LSTMState]]:
        """(batch, time, P) sorted by length -> n_layers outputs (batch, time, P) and each
        layer's final (h, c). `dropout` (training) applies to each layer's input, and the
        residual adds the dropped input, as bilm-tf's DropoutWrapper(ResidualWrapper(cell));
        `weight_drop` (training) to each layer's recurrent weights (`run_layers`)."""
        return run_stacks([self], [inputs], batch_sizes, [state], dropout, weight_drop)[0]


def run_stacks(
    stacks: Sequence[LSTMStack],
    inputs: Sequence[torch.Tensor],
    batch_sizes: List[int],
    states: Sequence[Optional[List[LSTMState]]],
    dropout: float = 0.0,
    weight_drop: float = 0.0,
) -> List[Tuple[List[torch.Tensor], List[LSTMState]]]:
    """`LSTMStack.forward` of each stack over its own input, with the same packing, layer
    by layer: in training the layer of every stack runs in one time loop (`run_layers`).
    Returns, per stack, its layers' outputs and final states."""
    if len({len(stack.layers) for stack in stacks}) > 1:
        raise ValueError(f"stacks run together need as many layers each, got {[len(stack.layers) for stack in stacks]}")
    results: List[Tuple[List[torch.Tensor], List[LSTMState]]] = [([], []) for _ in stacks]
    xs = list(inputs)
    for index in range(len(stacks[0].layers)):
        layer_inputs = [nn.functional.dropout(x, dropout) if dropout else x for x in xs]
        layers = [cast(ProjectedLSTM, stack.layers[index]) for stack in stacks]
        layer_states = [state[index] if state is not None else None for state in states]
        for direction, (y, final) in enumerate(run_layers(layers, layer_inputs, batch_sizes, layer_states, weight_drop)):
            if stacks[direction].use_skip_connections and index > 0:
                y = y + layer_inputs[direction]
            results[direction][0].append(y)
            results[direction][1].append(final)
            xs[direction] = y
    return results


def running_rows(sorted_lengths: Sequence[int], time: int) -> List[int]:
    """For each step t < time, how many rows of a longest-first batch are still running."""
    counts, running = [], len(sorted_lengths)
    for t in range(time):
        while running and sorted_lengths[running - 1] <= t:
            running -= 1
        counts.append(running)
    return counts


def reverse_within_length(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first `length` steps; (batch, time, dim) -> same shape."""
    time = x.shape[1]
    steps = torch.arange(time, device=x.device).unsqueeze(0)
    lengths = lengths.unsqueeze(1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class BiLM(nn.Module):
    """Input ids of tokenized sentences -> all ELMo layers.

    A token's input ids are what its token encoder reads: (n_chars,) char ids for the
    char-CNN, one word id for the word table. `input_ids` makes them from strings."""

    boundary_ids: torch.Tensor
    """The input ids of `<S>` and `</S>`: (2, *id_shape)."""
    warm_h: torch.Tensor
    """(2, n_layers, P): the stored warm initial h per direction and layer (warm_state only)."""
    warm_c: torch.Tensor
    """(2, n_layers, lstm_dim): the stored warm initial c (warm_state only)."""

    def __init__(self, config: BiLMConfig, words: Optional[Sequence[str]] = None) -> None:
        """`words`: the vocabulary of a word-level biLM (`<S>`, `</S>`, `<UNK>` first);
        None for the char-CNN."""
        super().__init__()
        self.config = config
        self.token_encoder: Union[TokenEncoder, WordEncoder]
        if config.token_encoder == "words":
            if words is None:
                raise ValueError("a biLM with token_encoder 'words' needs its vocabulary (words)")
            self.token_encoder = WordEncoder(words, config.projection_dim)
        else:
            if words is not None:
                raise ValueError("words are only for a biLM with token_encoder 'words'")
            self.token_encoder = TokenEncoder(config)
        self.forward_stack = LSTMStack(config)
        self.backward_stack = LSTMStack(config)
        self.register_buffer("boundary_ids", torch.from_numpy(self.token_encoder.boundary_ids()), persistent=False)
        if config.warm_state:
            # [direction, layer] initial h and c shared by every row; see nn.warm_state.
            output_dim = cast(ProjectedLSTM, self.forward_stack.layers[0]).output_dim
            self.register_buffer("warm_h", torch.zeros(2, config.n_layers, output_dim))
            self.register_buffer("warm_c", torch.zeros(2, config.n_layers, config.lstm_dim))

    @property
    def n_output_layers(self) -> int:
        return self.config.n_output_layers

    @property
    def words(self) -> Optional[Tuple[str, ...]]:
        """The vocabulary of a word-level biLM; None for the char-CNN."""
        return self.token_encoder.words if isinstance(self.token_encoder, WordEncoder) else None

    @property
    def device(self) -> torch.device:
        return self.boundary_ids.device

    def input_ids(self, sentences: Sequence[Sequence[str]]) -> torch.Tensor:
        """(batch, max_len, *id_shape) int64 input ids of tokenized sentences, 0 past each
        row's length; id_shape is (n_chars,) for the char-CNN and () for words."""
        lengths = numpy.array([len(s) for s in sentences], dtype=numpy.int64)
        ids = self.token_encoder.string_ids([token for sentence in sentences for token in sentence])
        out = numpy.zeros((len(sentences), int(lengths.max(initial=0)), *ids.shape[1:]), dtype=numpy.int64)
        out[numpy.arange(out.shape[1]) < lengths[:, None]] = ids
        return torch.from_numpy(out)

    def boundary_vectors(self) -> torch.Tensor:
        """(2, P): the token encodings of <S> and </S>."""
        return self.token_encoder(self.boundary_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        lengths: Union[torch.Tensor, Sequence[int]],
        state: Optional[BiLMState] = None,
    ) -> BiLMOutput:
        """input_ids: (batch, time, *id_shape), rows right-padded with 0; lengths: (batch,).

        `state` (stateful mode) is the initial LSTM state per row; when None, the model's
        warm state if it has one, else zeros.
        Only real tokens go through the token encoder.
        """
        lengths = self._check_lengths(lengths, input_ids.shape[0], input_ids.shape[1], input_ids.device)
        return self.contextualize(self._encode_tokens(input_ids, lengths), lengths, state)

    def contextualize(
        self,
        tokens: torch.Tensor,
        lengths: Union[torch.Tensor, Sequence[int]],
        state: Optional[BiLMState] = None,
        boundaries: Optional[torch.Tensor] = None,
    ) -> BiLMOutput:
        """Run both LSTM stacks over token encodings.

        tokens: (batch, time, P) from the token encoder, rows right-padded;
        lengths: (batch,); state: initial LSTM state per row (when None: the model's warm
        state if it has one, else zeros);
        boundaries: (2, P) encodings of <S> and </S> if already at hand.
        """
        lengths = self._check_lengths(lengths, tokens.shape[0], tokens.shape[1], tokens.device)
        batch, time = tokens.shape[:2]
        if batch == 0 or time == 0:
            return self._empty_output(batch, time, tokens, state)
        run = self._run_stacks(tokens, lengths, state, boundaries)
        stacked = [torch.cat([run.framed, run.framed], dim=-1)]
        stacked += [torch.cat([f, b], dim=-1) for f, b in zip(run.forward_layers, run.backward_layers)]
        layers = torch.stack(stacked)[:, :, 1 : time + 1]
        mask = torch.arange(time, device=tokens.device).unsqueeze(0) < run.sorted_lengths.unsqueeze(1)
        layers = layers * mask.unsqueeze(0).unsqueeze(-1)
        return BiLMOutput(layers[:, run.restore], mask[run.restore], run.final_state)

    def top_states(
        self, input_ids: torch.Tensor, lengths: Union[torch.Tensor, Sequence[int]], dropout: float = 0.0, weight_drop: float = 0.0
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """For language-model training: the top forward and backward outputs over each
        framed sentence (<S> tokens </S>), both (batch, time + 2, P) in input row order,
        position j of a row of length n holding <S> at 0, its tokens at 1..n, </S> at n + 1.
        `dropout` applies to every LSTM layer's input, `weight_drop` to every layer's
        recurrent weights (`run_layers`)."""
        lengths = self._check_lengths(lengths, input_ids.shape[0], input_ids.shape[1], input_ids.device)
        if input_ids.shape[1] == 0:
            raise ValueError("top_states needs at least one token per sentence")
        run = self._run_stacks(self._encode_tokens(input_ids, lengths), lengths, None, None, dropout, weight_drop)
        return run.forward_layers[-1][run.restore], run.backward_layers[-1][run.restore]

    def _encode_tokens(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(batch, time, *id_shape) -> (batch, time, P); only real tokens are encoded, padding is 0."""
        mask = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0) < lengths.unsqueeze(1)
        tokens = self.token_encoder.embedding_weight.new_zeros(*input_ids.shape[:2], self.config.projection_dim)
        tokens[mask] = self.token_encoder(input_ids[mask]).to(tokens.dtype)
        return tokens

    def _run_stacks(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        state: Optional[BiLMState],
        boundaries: Optional[torch.Tensor],
        dropout: float = 0.0,
        weight_drop: float = 0.0,
    ) -> "_StackRun":
        """Frame each sentence with <S> and </S>, sort rows by length, run both stacks."""
        batch, time = tokens.shape[:2]
        if boundaries is None:
            boundaries = self.boundary_vectors()
        if state is None and self.config.warm_state:
            state = self.warm_state_rows(batch)
        order = torch.argsort(lengths, descending=True, stable=True)
        restore = torch.argsort(order)
        sorted_lengths = lengths[order]
        framed_lengths = sorted_lengths + 2
        framed = tokens.new_zeros(batch, time + 2, tokens.shape[2])
        framed[:, 1 : time + 1] = tokens[order]
        framed[:, 0] = boundaries[0]
        framed[torch.arange(batch, device=tokens.device), sorted_lengths + 1] = boundaries[1].to(framed.dtype)
        batch_sizes = running_rows(framed_lengths.tolist(), time + 2)
        sorted_state = None
        if state is not None:
            sorted_state = [[(h[order], c[order]) for h, c in direction] for direction in state]
        (forward_layers, forward_final), (backward_layers, backward_final) = run_stacks(
            [self.forward_stack, self.backward_stack],
            [framed, reverse_within_length(framed, framed_lengths)],
            batch_sizes,
            [sorted_state[0], sorted_state[1]] if sorted_state else [None, None],
            dropout,
            weight_drop,
        )
        backward_layers = [reverse_within_length(y, framed_lengths) for y in backward_layers]
        final = [[(h[restore], c[restore]) for h, c in finals] for finals in (forward_final, backward_final)]
        return _StackRun(framed, forward_layers, backward_layers, final, restore, sorted_lengths)

    def warm_state_rows(self, batch: int) -> BiLMState:
        """The stored warm state repeated for `batch` rows."""
        layers = range(self.config.n_layers)
        return [[(self.warm_h[d, k].expand(batch, -1), self.warm_c[d, k].expand(batch, -1)) for k in layers] for d in range(2)]

    @staticmethod
    def _check_lengths(lengths: Union[torch.Tensor, Sequence[int]], batch: int, time: int, device) -> torch.Tensor:
        lengths = torch.as_tensor(lengths, dtype=torch.long, device=device)
        if lengths.shape != (batch,):
            raise ValueError(f"expected {batch} lengths, got {tuple(lengths.shape)}")
        if batch and time == 0 and int(lengths.max()) > 0:
            raise ValueError(f"sentence lengths must be 0 for an empty batch, got {lengths.tolist()}")
        if batch and time and (int(lengths.min()) < 1 or int(lengths.max()) > time):
            raise ValueError(f"sentence lengths must lie in 1..{time} (the padded length), got {lengths.tolist()}")
        return lengths

    def _empty_output(self, batch: int, time: int, like: torch.Tensor, state: Optional[BiLMState]) -> BiLMOutput:
        layers = like.new_zeros(self.n_output_layers, batch, time, self.config.output_dim, dtype=torch.float32)
        mask = torch.zeros(batch, time, dtype=torch.bool, device=like.device)
        return BiLMOutput(layers, mask, state if state is not None else self.zero_state(batch))

    def zero_state(self, batch: int) -> BiLMState:
        """All-zero LSTM state for `batch` rows."""
        like = self.token_encoder.embedding_weight
        stacks = (self.forward_stack, self.backward_stack)
        return [[cast(ProjectedLSTM, layer).zero_state(batch, like) for layer in stack.layers] for stack in stacks]


def bilm_skeleton(config: BiLMConfig, words: Optional[Sequence[str]] = None) -> BiLM:
    """A `BiLM` of `config` on the meta device: every tensor's shape and nothing allocated,
    whatever sizes an untrusted configuration asks for (check a file's shapes against it
    before building the real one)."""
    with torch.device("meta"):
        return BiLM(config, words)


class StatefulBiLM:
    """Carries LSTM state per batch row across calls, as bilm-tf and AllenNLP do.

    Only for reproducing the reference implementations: a row's vectors then depend on
    what that row saw before. Rows beyond the current batch keep their state.
    """

    def __init__(self, bilm: BiLM) -> None:
        self.bilm = bilm
        self.state: Optional[BiLMState] = None

    def reset(self) -> None:
        self.state = None

    def __call__(self, input_ids: torch.Tensor, lengths: Union[torch.Tensor, Sequence[int]]) -> BiLMOutput:
        batch = input_ids.shape[0]
        if self.state is None:
            self.state = self.bilm.zero_state(batch)
        self._grow(batch)
        initial = [[(h[:batch], c[:batch]) for h, c in direction] for direction in self.state]
        output = self.bilm(input_ids, lengths, initial)
        self.state = [
            [(torch.cat([h_new.detach(), h[batch:]]), torch.cat([c_new.detach(), c[batch:]])) for (h_new, c_new), (h, c) in zip(new, old)]
            for new, old in zip(output.state, self.state)
        ]
        return output

    def _grow(self, batch: int) -> None:
        assert self.state is not None
        grown = []
        for direction in self.state:
            layers = []
            for h, c in direction:
                missing = batch - h.shape[0]
                if missing > 0:
                    h = torch.cat([h, h.new_zeros(missing, h.shape[1])])
                    c = torch.cat([c, c.new_zeros(missing, c.shape[1])])
                layers.append((h, c))
            grown.append(layers)
        self.state = grown
