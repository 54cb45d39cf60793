"""BiLMConfig: validation and a lossless dict round trip."""

import dataclasses
import json

import pytest

from elmo_testing import TINY_SETTINGS
from spacy_elmo.nn.config import BiLMConfig

TINY = TINY_SETTINGS


def tiny(**overrides):
    return BiLMConfig(**{**TINY, **overrides})


def test_defaults_are_the_published_elmo_shape():
    config = BiLMConfig()
    assert config.n_filters == 2048
    assert config.output_dim == 256
    assert config.cell_clip == 3.0 and config.proj_clip == 3.0


def test_derived_sizes():
    config = tiny()
    assert config.n_filters == 4 + 8 + 16
    assert config.output_dim == 12


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (dict(activation="sigmoid"), "activation"),
        (dict(activation="RELU"), "activation"),
        (dict(projection_dim=13), "projection_dim"),
        (dict(filters=((1, 4), (51, 8))), "wider"),
        (dict(filters=((1, 4), (4, 8)), max_characters_per_token=3), "wider"),
        (dict(filters=()), "filters"),
        (dict(filters=((0, 4),)), "positive"),
        (dict(filters=((2, 0),)), "positive"),
        (dict(n_layers=0), "n_layers"),
        (dict(lstm_dim=0, projection_dim=0), "lstm_dim"),
        (dict(char_embedding_dim=0), "char_embedding_dim"),
        (dict(n_highway=-1), "n_highway"),
        (dict(cell_clip=0.0), "cell_clip"),
        (dict(proj_clip=-1.0), "proj_clip"),
        (dict(cell_clip=float("nan")), "cell_clip must be a positive finite number or None"),
        (dict(proj_clip=float("inf")), "proj_clip must be a positive finite number or None"),
        (dict(lstm_dim=2**40), "lstm_dim must be below 2\\*\\*31"),
        (dict(lstm_dim=1e300), "lstm_dim must be below 2\\*\\*31"),
        (dict(filters=((1, 2**31),)), "filter widths and counts must be below 2\\*\\*31"),
        (dict(max_characters_per_token=1001), "max_characters_per_token must be at most 1000 \\(longer tokens are cut to it\\)$"),
        (dict(n_layers=1001), "n_layers must be at most 1000, got 1001"),
        (dict(n_highway=10**6), "n_highway must be at most 1000, got 1000000"),
        (dict(filters=((1, 1),) * 1001), "the number of filters must be at most 1000, got 1001"),
        (dict(max_characters_per_token=2, filters=((1, 4),)), "max_characters_per_token"),
    ],
)
def test_invalid_settings_raise_value_error(overrides, fragment):
    with pytest.raises(ValueError, match=fragment):
        tiny(**overrides)


@pytest.mark.parametrize("data", [[1, 2], "settings", None])
def test_a_configuration_that_is_not_an_object_is_a_value_error(data):
    with pytest.raises(ValueError, match="must be an object of settings"):
        BiLMConfig.from_dict(data)


def test_all_problems_are_reported_together():
    with pytest.raises(ValueError) as info:
        tiny(activation="gelu", n_layers=0)
    assert "activation" in str(info.value) and "n_layers" in str(info.value)


@pytest.mark.parametrize("value", [261, 262])
def test_the_legacy_n_characters_key_of_earlier_configs_loads(value):
    data = {**tiny().to_dict(), "n_characters": value}
    assert BiLMConfig.from_dict(data) == tiny()
    assert "n_characters" not in BiLMConfig.from_dict(data).to_dict()


@pytest.mark.parametrize("value", [263, 260, 256, "262", 262.0, True])
def test_a_legacy_n_characters_it_never_could_hold_is_an_error(value):
    with pytest.raises(ValueError, match=f"n_characters must be 261 or 262, got {value!r}"):
        BiLMConfig.from_dict({**tiny().to_dict(), "n_characters": value})


@pytest.mark.parametrize(
    "overrides",
    [
        dict(projection_dim=12),  # equal to lstm_dim is allowed
        dict(filters=((50, 2),)),  # exactly max_characters_per_token wide
        dict(cell_clip=None, proj_clip=None),
        dict(n_highway=0),
        dict(activation="tanh"),
    ],
)
def test_valid_edge_settings_are_accepted(overrides):
    config = tiny(**overrides)
    for key, value in overrides.items():
        assert getattr(config, key) == value


def test_filters_are_normalized_to_int_tuples():
    config = tiny(filters=[[1, 4], [2.0, 8]])
    assert config.filters == ((1, 4), (2, 8))
    assert all(type(v) is int for pair in config.filters for v in pair)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n_layers": 2.5}, "n_layers must be an integer, got 2.5"),
        ({"lstm_dim": "12"}, "lstm_dim must be an integer, got '12'"),
        ({"n_highway": True}, "n_highway must be an integer, got True"),
        ({"use_skip_connections": "false"}, "use_skip_connections must be true or false, got 'false'"),
        ({"cell_clip": "3"}, "cell_clip must be a number or None, got '3'"),
        ({"filters": [[1, 4], [2, 8.5]]}, "filters must be \\(width, count\\) pairs of integers"),
    ],
)
def test_values_of_the_wrong_type_are_named_not_converted(change, message):
    with pytest.raises(ValueError, match=f"Invalid biLM configuration: {message}"):
        tiny(**change)


def test_whole_numbers_written_as_floats_are_integers():
    config = tiny(n_layers=2.0, lstm_dim=12.0, cell_clip=3)
    assert config == tiny(n_layers=2, lstm_dim=12, cell_clip=3.0) and type(config.n_layers) is int and type(config.cell_clip) is float


def test_config_is_frozen():
    config = tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.lstm_dim = 7


@pytest.mark.parametrize("overrides", [{}, dict(cell_clip=None, activation="tanh", use_skip_connections=False)])
def test_dict_round_trip_through_json(overrides):
    config = tiny(**overrides)
    data = config.to_dict()
    assert data["filters"] == [[1, 4], [2, 8], [3, 16]]
    restored = BiLMConfig.from_dict(json.loads(json.dumps(data)))
    assert restored == config
    assert restored.to_dict() == data


def test_to_dict_holds_every_field():
    data = tiny().to_dict()
    assert set(data) == {f.name for f in dataclasses.fields(BiLMConfig)}


def test_from_dict_with_missing_keys_uses_defaults():
    config = BiLMConfig.from_dict({"lstm_dim": 32, "projection_dim": 8})
    assert config.lstm_dim == 32 and config.projection_dim == 8
    assert config.filters == BiLMConfig().filters


def test_unknown_keys_are_rejected():
    data = tiny().to_dict()
    data["hidden_size"] = 10
    data["dropout"] = 0.1
    with pytest.raises(ValueError, match="dropout.*hidden_size"):
        BiLMConfig.from_dict(data)


def test_from_dict_still_validates():
    data = tiny().to_dict()
    data["projection_dim"] = 100
    with pytest.raises(ValueError, match="projection_dim"):
        BiLMConfig.from_dict(data)
