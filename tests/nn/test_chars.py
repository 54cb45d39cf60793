"""ELMo character ids: the bilm-tf/AllenNLP byte mapping, all ids shifted by +1."""

import numpy
import pytest

from spacy_elmo.nn.chars import (
    MAX_CHARACTERS,
    batch_to_char_ids,
    begin_of_sentence_ids,
    end_of_sentence_ids,
    token_to_char_ids,
)

# Expected ids written out by hand: begin-of-word 258 + 1, end-of-word 259 + 1,
# in-word padding 260 + 1, a byte b is b + 1.
BOW, EOW, PAD = 259, 260, 261


def expected_ids(byte_values, width=50):
    row = [BOW] + [b + 1 for b in byte_values] + [EOW]
    return row + [PAD] * (width - len(row))


def test_module_constants_are_the_elmo_ones():
    assert MAX_CHARACTERS == 50


def test_single_ascii_character_exact_ids():
    ids = token_to_char_ids("a")
    assert ids.shape == (50,)
    assert ids.dtype == numpy.int64
    assert ids.tolist() == [259, 98, 260] + [261] * 47


def test_short_ascii_token_exact_ids():
    # "Hi!" is bytes 72, 105, 33
    assert token_to_char_ids("Hi!").tolist() == [259, 73, 106, 34, 260] + [261] * 45


def test_empty_token_is_just_word_boundaries():
    assert token_to_char_ids("").tolist() == [259, 260] + [261] * 48


@pytest.mark.parametrize(
    "token,byte_values",
    [
        ("é", [0xC3, 0xA9]),
        ("\U0001f600", [0xF0, 0x9F, 0x98, 0x80]),  # grinning face emoji
        ("日本", [0xE6, 0x97, 0xA5, 0xE6, 0x9C, 0xAC]),
        ("a\u00a0b", [0x61, 0xC2, 0xA0, 0x62]),  # no-break space
    ],
)
def test_multibyte_utf8_maps_to_bytes_plus_one(token, byte_values):
    assert token_to_char_ids(token).tolist() == expected_ids(byte_values)


def test_token_of_exactly_48_bytes_is_not_cut():
    ids = token_to_char_ids("x" * 48)
    assert ids[0] == BOW
    assert (ids[1:49] == ord("x") + 1).all()
    assert ids[49] == EOW


@pytest.mark.parametrize("length", [49, 60, 500])
def test_long_ascii_token_is_cut_to_48_bytes_with_end_of_word_last(length):
    token = "".join(chr(ord("a") + i % 26) for i in range(length))
    ids = token_to_char_ids(token)
    assert ids.shape == (50,)
    assert ids[0] == BOW
    assert ids[1:49].tolist() == [ord(ch) + 1 for ch in token[:48]]
    assert ids[49] == EOW
    assert PAD not in ids.tolist()


def test_long_multibyte_token_is_cut_by_bytes_not_characters():
    token = "日" * 20  # 60 bytes, 3 per character
    ids = token_to_char_ids(token)
    raw = list(token.encode("utf-8"))[:48]
    assert ids[1:49].tolist() == [b + 1 for b in raw]
    assert ids[49] == EOW


def test_cut_in_the_middle_of_a_multibyte_character_does_not_crash():
    token = "a" + "\U0001f600" * 20  # 81 bytes; byte 48 falls inside an emoji
    ids = token_to_char_ids(token)
    assert ids[1:49].tolist() == [b + 1 for b in token.encode("utf-8")[:48]]
    assert ids[49] == EOW


@pytest.mark.parametrize("width", [10, 20])
def test_custom_width_cuts_at_width_minus_two(width):
    ids = token_to_char_ids("abcdefghijklmnopqrstuvwxyz", width=width)
    assert ids.shape == (width,)
    assert ids.tolist() == expected_ids([ord(c) for c in "abcdefghijklmnopqrstuvwxyz"[: width - 2]], width)


@pytest.mark.parametrize("token", ["\ud800", "a\udfffb", "\udc80" * 60])
def test_lone_surrogates_do_not_crash(token):
    ids = token_to_char_ids(token)
    assert ids.shape == (50,)
    assert ids[0] == BOW
    assert EOW in ids.tolist()
    assert ids.min() >= 1 and ids.max() <= 261


def test_lone_surrogate_keeps_its_neighbours():
    ids = token_to_char_ids("a\udfffb").tolist()
    end = ids.index(EOW)
    assert ids[1] == ord("a") + 1
    assert ids[end - 1] == ord("b") + 1


@pytest.mark.parametrize("token", ["a", "", "\U0001f600", "x" * 100, "\ud800"])
def test_ids_never_zero_and_within_range(token):
    ids = token_to_char_ids(token)
    assert ids.min() >= 1
    assert ids.max() <= 261


def test_begin_and_end_of_sentence_ids():
    assert begin_of_sentence_ids().tolist() == [259, 257, 260] + [261] * 47
    assert end_of_sentence_ids().tolist() == [259, 258, 260] + [261] * 47
    assert begin_of_sentence_ids(8).tolist() == [259, 257, 260] + [261] * 5
    assert end_of_sentence_ids(8).tolist() == [259, 258, 260] + [261] * 5


def test_batch_to_char_ids_pads_with_zero_rows():
    sentences = [["a", "bc", "d"], ["xyz"], []]
    out = batch_to_char_ids(sentences)
    assert out.shape == (3, 3, 50)
    assert out.dtype == numpy.int64
    assert out[0, 0].tolist() == expected_ids([ord("a")])
    assert out[0, 1].tolist() == expected_ids([ord("b"), ord("c")])
    assert out[0, 2].tolist() == expected_ids([ord("d")])
    assert out[1, 0].tolist() == expected_ids([ord(c) for c in "xyz"])
    assert (out[1, 1:] == 0).all()
    assert (out[2] == 0).all()


def test_batch_to_char_ids_empty_batch():
    assert batch_to_char_ids([]).shape == (0, 0, 50)
    assert batch_to_char_ids([[], []]).shape == (2, 0, 50)


def test_batch_to_char_ids_custom_width():
    out = batch_to_char_ids([["abcdef"]], width=6)
    assert out.shape == (1, 1, 6)
    assert out[0, 0].tolist() == [BOW, 98, 99, 100, 101, EOW]
