"""Pure PyTorch ELMo: character ids, token encoder, projected LSTMs, the biLM, scalar mix."""

from .bilm import BiLM, BiLMOutput, BiLMState, StatefulBiLM
from .chars import batch_to_char_ids, token_to_char_ids
from .config import BiLMConfig
from .lstm import ProjectedLSTM
from .scalar_mix import ScalarMix
from .token_encoder import TokenEncoder
from .word_encoder import WordEncoder

__all__ = [
    "BiLM",
    "BiLMConfig",
    "BiLMOutput",
    "BiLMState",
    "ProjectedLSTM",
    "ScalarMix",
    "StatefulBiLM",
    "TokenEncoder",
    "WordEncoder",
    "batch_to_char_ids",
    "token_to_char_ids",
]
