"""The public ELMo `options.json` (bilm-tf / AllenNLP) <-> `BiLMConfig`."""

import json
from pathlib import Path
from typing import Any, Dict, Union

from ..nn.chars import N_CHARACTER_IDS, check_character_count
from ..nn.config import BiLMConfig
from .errors import ModelFileError


def config_from_options(options: Dict[str, Any]) -> BiLMConfig:
    """Map a parsed options dict to a `BiLMConfig`; KeyError/ValueError on bad content."""
    lstm, cnn = _section(options, "lstm"), _section(options, "char_cnn")
    check_character_count(cnn.get("n_characters", N_CHARACTER_IDS), "char_cnn.n_characters")
    return BiLMConfig(  # BiLMConfig checks the types: "false" is not read as true, nor 2.5 as 2
        filters=cnn["filters"],
        char_embedding_dim=_section(cnn, "embedding", "char_cnn.")["dim"],
        n_highway=cnn["n_highway"],
        activation=cnn.get("activation", "relu"),
        max_characters_per_token=cnn.get("max_characters_per_token", 50),
        lstm_dim=lstm["dim"],
        projection_dim=lstm["projection_dim"],
        n_layers=lstm["n_layers"],
        cell_clip=lstm.get("cell_clip"),
        proj_clip=lstm.get("proj_clip"),
        use_skip_connections=lstm.get("use_skip_connections", False),
    )


def _section(options: Any, key: str, prefix: str = "") -> Dict[str, Any]:
    """`options[key]`, which must be a JSON object; KeyError where it is missing."""
    if not isinstance(options, dict):
        raise ValueError(f"{prefix.rstrip('.') or 'the options'} must be a JSON object")
    section = options[key]
    if not isinstance(section, dict):
        raise ValueError(f"'{prefix}{key}' must be a JSON object, got {json.dumps(section)[:40]}")
    return section


def options_from_config(config: BiLMConfig) -> Dict[str, Any]:
    """The options dict that bilm-tf and AllenNLP read for inference (n_characters 262).
    ValueError for a word-level biLM: the public format holds char-CNN models only."""
    if config.token_encoder != "characters":
        raise ValueError(
            f"the public ELMo format holds char-CNN biLMs only; this one has token_encoder {config.token_encoder!r} "
            "(use it through its model directory or a spaCy pipeline instead)"
        )
    lstm: Dict[str, Any] = {
        "dim": config.lstm_dim,
        "projection_dim": config.projection_dim,
        "n_layers": config.n_layers,
        "use_skip_connections": config.use_skip_connections,
        "cell_clip": config.cell_clip,  # null when unclipped: AllenNLP reads both keys
        "proj_clip": config.proj_clip,
    }
    return {
        "lstm": lstm,
        "char_cnn": {
            "embedding": {"dim": config.char_embedding_dim},
            "filters": [list(f) for f in config.filters],
            "n_highway": config.n_highway,
            "n_characters": N_CHARACTER_IDS,
            "max_characters_per_token": config.max_characters_per_token,
            "activation": config.activation,
        },
    }


def read_options(path: Union[str, Path]) -> BiLMConfig:
    """Read an options.json file; errors name the file and the problem."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(path, "options file not found")
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelFileError(path, f"not a valid JSON options file ({err})") from err
    try:
        return config_from_options(options)
    except KeyError as err:
        raise ModelFileError(path, f"options file lacks the key {err}") from err
    except (TypeError, ValueError) as err:
        raise ModelFileError(path, f"invalid options ({err})") from err


def write_options(config: BiLMConfig, path: Union[str, Path]) -> None:
    Path(path).write_text(json.dumps(options_from_config(config), indent=2), encoding="utf-8")
