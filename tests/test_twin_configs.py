"""The downstream twins: the baseline is spaCy's own efficiency config, and the ELMo arm
differs from it only by the ELMo branch."""

import copy
import subprocess
import sys

from thinc.api import Config

from elmo_testing import REPO

BASE = REPO / "configs" / "ud-base.cfg"
ELMO = REPO / "configs" / "ud-elmo.cfg"
ELMO_IO = REPO / "configs" / "ud-elmo-io.cfg"
ELMO_LAYERS = REPO / "configs" / "ud-elmo-layers.cfg"
TASKS = ("tagger", "morphologizer", "parser")


def load(path):
    return Config().from_disk(path, interpolate=False)


def test_the_baseline_is_what_spacy_init_config_writes(tmp_path):
    command = [
        sys.executable,
        "-m",
        "spacy",
        "init",
        "config",
        str(tmp_path / "generated.cfg"),
        "-l",
        "en",
        "-p",
        "tagger,morphologizer,parser",
        "-o",
        "efficiency",
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    assert load(tmp_path / "generated.cfg") == load(BASE)


def without_elmo_branch(config):
    """The ELMo arm with its ELMo branch taken out."""
    config = copy.deepcopy(config)
    del config["paths"]["elmo"]
    del config["components"]["elmo"]
    config["nlp"]["pipeline"] = [name for name in config["nlp"]["pipeline"] if name != "elmo"]
    config["training"]["frozen_components"].remove("elmo")
    config["training"]["annotating_components"].remove("elmo")
    tok2vec = config["components"]["tok2vec"]["model"]
    tok2vec["embed"] = tok2vec["embed"]["features"]
    return config


def test_the_elmo_twin_differs_from_the_baseline_only_by_the_elmo_branch():
    elmo, base = load(ELMO), load(BASE)
    assert without_elmo_branch(elmo) == base
    assert elmo["nlp"]["pipeline"][0] == "elmo"
    assert elmo["components"]["elmo"] == {"factory": "elmo", "weights": "${paths.elmo}"}
    assert elmo["training"]["frozen_components"] == ["elmo"] == elmo["training"]["annotating_components"]
    embed = elmo["components"]["tok2vec"]["model"]["embed"]
    assert embed["@architectures"] == "spacy-elmo.WithElmo.v1"
    assert embed["mix"]["@architectures"] == "spacy-elmo.ElmoScalarMix.v2"
    assert embed["width"] == base["components"]["tok2vec"]["model"]["embed"]["width"]


def test_both_twins_build_and_the_elmo_twin_has_one_shared_mix(tiny_model_dir):
    from spacy.util import load_model_from_config

    base = load_model_from_config(Config().from_disk(BASE), auto_fill=True)
    elmo = load_model_from_config(Config().from_disk(ELMO, overrides={"paths.elmo": str(tiny_model_dir)}), auto_fill=True)
    assert base.pipe_names == ["tok2vec", "tagger", "morphologizer", "parser"]
    assert elmo.pipe_names == ["elmo", *base.pipe_names]
    (mix,) = elmo.get_pipe("elmo").mixes["tok2vec"]
    assert (mix.get_dim("nL"), mix.get_dim("nO")) == (3, 12)  # from the model, typed nowhere
    assert list(elmo.get_pipe("elmo").mixes) == ["tok2vec"]


def test_the_input_and_output_twin_differs_from_the_elmo_twin_only_by_a_mix_per_component():
    io, elmo = load(ELMO_IO), load(ELMO)
    for task in TASKS:
        wrapped = io["components"][task]["model"]["tok2vec"]
        assert wrapped["@architectures"] == "spacy-elmo.WithElmo.v1"
        assert wrapped["mix"]["@architectures"] == "spacy-elmo.ElmoScalarMix.v2"
        assert wrapped["mix"]["dropout"] == "${components.tok2vec.model.embed.mix.dropout}"
        io["components"][task]["model"]["tok2vec"] = wrapped["features"]
    assert io == elmo


def test_the_input_and_output_twin_has_a_mix_per_component_with_the_input_mix_dropout(tiny_model_dir):
    from spacy.util import load_model_from_config

    overrides = {"paths.elmo": str(tiny_model_dir), "components.tok2vec.model.embed.mix.dropout": 0.3}
    nlp = load_model_from_config(Config().from_disk(ELMO_IO, overrides=overrides), auto_fill=True)
    mixes = nlp.get_pipe("elmo").mixes
    assert list(mixes) == ["tok2vec", *TASKS]
    for (mix,) in mixes.values():
        assert (mix.get_dim("nL"), mix.get_dim("nO"), mix.attrs["elmo_dropout"]) == (3, 12, 0.3)


def test_the_layers_twin_differs_from_the_elmo_twin_only_by_its_reading_of_the_layers(tiny_model_dir):
    from spacy.util import load_model_from_config

    layers, elmo = load(ELMO_LAYERS), load(ELMO)
    mix = elmo["components"]["tok2vec"]["model"]["embed"]["mix"]
    assert layers["components"]["tok2vec"]["model"]["embed"]["mix"] == {"@architectures": "spacy-elmo.ElmoLayers.v1", "dropout": mix["dropout"]}
    layers["components"]["tok2vec"]["model"]["embed"]["mix"] = mix
    assert layers == elmo
    nlp = load_model_from_config(Config().from_disk(ELMO_LAYERS, overrides={"paths.elmo": str(tiny_model_dir)}), auto_fill=True)
    (reader,) = nlp.get_pipe("elmo").mixes["tok2vec"]
    assert reader.name == "elmo_layers" and (reader.get_dim("nL"), reader.get_dim("nW")) == (3, 12)  # nO = 36 comes with initialize
