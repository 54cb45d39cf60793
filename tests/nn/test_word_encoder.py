"""The word-level biLM: its vocabulary lookup, a char model it can copy exactly, batch
independence, gradients, and the inference paths (embedder, precisions, warm state)."""

import dataclasses

import pytest
import torch

from elmo_testing import TINY_CONFIG, TINY_WORD_CONFIG, WORDS, random_bilm, random_word_bilm
from spacy_elmo.nn.bilm import BiLM
from spacy_elmo.nn.config import BiLMConfig
from spacy_elmo.nn.embedder import Embedder
from spacy_elmo.nn.objective import BiLMObjective
from spacy_elmo.nn.precision import runtime_bilm
from spacy_elmo.nn.softmax import FullSoftmax
from spacy_elmo.nn.special_tokens import UNK_ID
from spacy_elmo.nn.warm_state import with_warm_state
from spacy_elmo.nn.word_encoder import WordEncoder

SENTENCES = [["the", "bank", "by", "the", "river", "."], ["money", "sat"], ["a", "zebra", "", "bank", "!", "the", "."]]


def run(bilm, sentences):
    with torch.no_grad():
        return bilm(bilm.input_ids(sentences), [len(s) for s in sentences])


def test_known_words_get_their_row_and_everything_else_is_unknown():
    encoder = WordEncoder(WORDS, 4)
    ids = encoder.string_ids(["bank", "zebra", "", "Bank", "<UNK>", "."])
    assert ids.tolist() == [WORDS.index("bank"), UNK_ID, UNK_ID, UNK_ID, UNK_ID, WORDS.index(".")]


def test_the_literal_boundary_strings_are_unknown_words_not_boundaries():
    encoder = WordEncoder(WORDS, 4)
    assert encoder.string_ids(["<S>", "</S>"]).tolist() == [UNK_ID, UNK_ID]
    assert encoder.boundary_ids().tolist() == [0, 1]


@pytest.mark.parametrize(
    "words, problem",
    [
        (("the", "<S>", "</S>", "<UNK>"), "must start with"),
        (("<S>", "</S>", "<UNK>", "the", "the"), "twice"),
        (("<S>", "</S>", "<UNK>", ""), "non-empty"),
    ],
)
def test_a_bad_word_vocabulary_is_refused(words, problem):
    with pytest.raises(ValueError, match=problem):
        WordEncoder(words, 4)


def test_a_word_config_needs_words_and_a_char_config_refuses_them():
    with pytest.raises(ValueError, match="needs its vocabulary"):
        BiLM(TINY_WORD_CONFIG)
    with pytest.raises(ValueError, match="only for a biLM with token_encoder 'words'"):
        BiLM(TINY_CONFIG, WORDS)
    with pytest.raises(ValueError, match="token_encoder must be one of"):
        BiLMConfig(token_encoder="bytes")


def test_input_ids_are_one_word_id_per_token_zero_padded():
    bilm = random_word_bilm()
    ids = bilm.input_ids(SENTENCES[1:])
    assert ids.shape == (2, 7) and ids.dtype == torch.int64
    assert ids[0].tolist() == [WORDS.index("money"), WORDS.index("sat"), 0, 0, 0, 0, 0]
    assert ids[1, 1].item() == UNK_ID and ids[1, 2].item() == UNK_ID


def test_a_word_model_equals_the_char_model_whose_encodings_it_holds():
    """Give the word table the char model's encoding of each word (and of <S>, </S>) and the
    same LSTMs: every layer must match the char model's, so both share the whole machinery."""
    chars = random_bilm()
    words = BiLM(TINY_WORD_CONFIG, WORDS)
    words.load_state_dict({k: v for k, v in chars.state_dict().items() if not k.startswith("token_encoder.")}, strict=False)
    with torch.no_grad():
        table = chars.token_encoder(torch.from_numpy(chars.token_encoder.string_ids(list(WORDS))))
        table[:2] = chars.boundary_vectors()
        words.token_encoder.embedding.weight.copy_(table)
    known = [[w for w in sentence if w in WORDS[3:]] for sentence in SENTENCES]
    # a few float32 ulps: the two paths sum in another order (seen: 1.9e-6 on values near 3.5, AVX2 CPU)
    torch.testing.assert_close(run(words.eval(), known).layers, run(chars, known).layers, atol=1e-6, rtol=2e-6)


def test_a_row_alone_equals_the_row_in_any_batch():
    bilm = random_word_bilm()
    together = run(bilm, SENTENCES).layers
    reordered = run(bilm, SENTENCES[::-1]).layers
    for index, sentence in enumerate(SENTENCES):
        alone = run(bilm, [sentence]).layers[:, 0]
        n = len(sentence)
        torch.testing.assert_close(together[:, index, :n], alone[:, :n], atol=1e-6, rtol=0)
        torch.testing.assert_close(reordered[:, len(SENTENCES) - 1 - index, :n], alone[:, :n], atol=1e-6, rtol=0)
    layer_zero = together[0, 0, 1, :6]
    torch.testing.assert_close(layer_zero, bilm.token_encoder.embedding.weight[WORDS.index("bank")].detach())


def test_training_gradients_reach_the_rows_of_the_words_seen_and_no_other():
    bilm = random_word_bilm().train()
    objective = BiLMObjective(bilm, FullSoftmax(6, len(WORDS)))
    sentences = [["the", "bank", "zebra"]]
    loss = objective(bilm.input_ids(sentences), [3], torch.tensor([[3, 4, UNK_ID]])).loss
    loss.backward()
    grad = bilm.token_encoder.embedding.weight.grad
    used = {0, 1, UNK_ID, WORDS.index("the"), WORDS.index("bank")}
    assert all(grad[i].abs().sum() > 0 for i in used)
    assert all(grad[i].abs().sum() == 0 for i in range(len(WORDS)) if i not in used)
    assert bilm.forward_stack.layers[0].input_weight.grad.abs().sum() > 0


def test_the_embedder_gives_the_model_s_vectors_from_its_cache_too():
    bilm = random_word_bilm()
    embedder = Embedder(bilm, cache_size=4)
    expected = run(bilm, SENTENCES).layers
    torch.testing.assert_close(embedder(SENTENCES).layers, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(embedder(SENTENCES).layers, expected, atol=1e-6, rtol=0)  # from the cache
    assert embedder.cached_tokens == 4


@pytest.mark.parametrize("precision, tolerance", [("bf16", 0.1), ("int8", 0.1)])
def test_approximate_precisions_run_a_word_model_close_to_fp32(precision, tolerance):
    bilm = random_word_bilm()
    expected = run(bilm, SENTENCES).layers
    approximate = Embedder(bilm, precision=precision)(SENTENCES).layers
    assert approximate.dtype == torch.float32
    assert (approximate - expected).abs().max() < tolerance * expected.abs().max()
    assert isinstance(runtime_bilm(bilm, precision).token_encoder, WordEncoder)


def test_a_warm_state_keeps_the_word_table():
    bilm = random_word_bilm()
    warm = with_warm_state(bilm, SENTENCES, rows=2)
    assert warm.words == bilm.words and warm.config == dataclasses.replace(bilm.config, warm_state=True)
    torch.testing.assert_close(warm.token_encoder.embedding.weight, bilm.token_encoder.embedding.weight)
    assert warm.warm_h.abs().sum() > 0
    assert not torch.allclose(run(warm, SENTENCES).layers[1], run(bilm, SENTENCES).layers[1])
