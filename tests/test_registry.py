"""Every factory and architecture the package declares resolves by name."""

import configparser
from pathlib import Path

import pytest
import spacy
from spacy.language import Language
from spacy.util import registry

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"


def declared(group: str):
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    lines = parser["options.entry_points"][group].strip().splitlines()
    return [tuple(part.strip() for part in line.split("=", 1)) for line in lines]


def test_entry_points_are_declared():
    assert [name for name, _ in declared("spacy_factories")] == ["elmo"]
    architectures = [name for name, _ in declared("spacy_architectures")]
    assert architectures == ["spacy-elmo.ElmoLayers.v1", "spacy-elmo.ElmoScalarMix.v1", "spacy-elmo.ElmoScalarMix.v2", "spacy-elmo.WithElmo.v1"]
    assert [name for name, _ in declared("spacy_callbacks")] == ["spacy-elmo.epoch_times.v1", "spacy-elmo.precomputed_layers.v1"]


@pytest.mark.parametrize("name,target", declared("spacy_factories"))
def test_factories_resolve(name, target):
    assert Language.has_factory(name)
    module, attr = target.split(":")
    assert registry.factories.get(Language.get_factory_name(name)) is getattr(__import__(module, fromlist=[attr]), attr)


@pytest.mark.parametrize("group,name,target", [(g, *entry) for g in ("spacy_architectures", "spacy_callbacks") for entry in declared(g)])
def test_architectures_and_callbacks_resolve(group, name, target):
    module, attr = target.split(":")
    table = registry.architectures if group == "spacy_architectures" else registry.callbacks
    assert table.get(name) is getattr(__import__(module, fromlist=[attr]), attr)


def test_every_registered_name_has_an_entry_point():
    import spacy_elmo  # noqa: F401  (registers everything by decorator)

    architectures = {name for name in registry.architectures.get_all() if name.startswith("spacy-elmo.")}
    assert architectures == {name for name, _ in declared("spacy_architectures")}
    callbacks = {name for name in registry.callbacks.get_all() if name.startswith("spacy-elmo.")}
    assert callbacks == {name for name, _ in declared("spacy_callbacks")}
    factories = {name for name, func in registry.factories.get_all().items() if func.__module__.startswith("spacy_elmo")}
    assert factories == {name for name, _ in declared("spacy_factories")}


def test_names_resolve_in_a_fresh_interpreter_through_entry_points():
    """Without importing spacy_elmo, spaCy finds the factory and the architectures."""
    import subprocess
    import sys

    names = [name for name, _ in declared("spacy_architectures")]
    callbacks = [name for name, _ in declared("spacy_callbacks")]
    code = (
        "import spacy\nfrom spacy.util import registry\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('elmo'); print(nlp.pipe_names)\n"
        f"print([registry.architectures.get(n).__name__ for n in {names!r}])\n"
        f"print([registry.callbacks.get(n).__name__ for n in {callbacks!r}])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "['elmo']" in result.stdout
    assert "['ElmoLayers', 'ElmoScalarMix', 'ElmoScalarMix_v2', 'WithElmo']" in result.stdout
    assert "['epoch_times', 'precomputed_layers']" in result.stdout
    assert spacy.__version__.startswith("3.")
