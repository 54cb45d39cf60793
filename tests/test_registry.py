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
    assert "spacy-elmo.ElmoScalarMix.v1" in [name for name, _ in declared("spacy_architectures")]


@pytest.mark.parametrize("name,target", declared("spacy_factories"))
def test_factories_resolve(name, target):
    assert Language.has_factory(name)
    module, attr = target.split(":")
    assert registry.factories.get(Language.get_factory_name(name)) is getattr(__import__(module, fromlist=[attr]), attr)


@pytest.mark.parametrize("name,target", declared("spacy_architectures"))
def test_architectures_resolve(name, target):
    module, attr = target.split(":")
    assert registry.architectures.get(name) is getattr(__import__(module, fromlist=[attr]), attr)


def test_every_registered_name_has_an_entry_point():
    import spacy_elmo  # noqa: F401  (registers everything by decorator)

    architectures = {name for name in registry.architectures.get_all() if name.startswith("spacy-elmo.")}
    assert architectures == {name for name, _ in declared("spacy_architectures")}
    factories = {name for name, func in registry.factories.get_all().items() if func.__module__.startswith("spacy_elmo")}
    assert factories == {name for name, _ in declared("spacy_factories")}


def test_names_resolve_in_a_fresh_interpreter_through_entry_points():
    """Without importing spacy_elmo, spaCy finds the factory and the architectures."""
    import subprocess
    import sys

    names = [name for name, _ in declared("spacy_architectures")]
    code = (
        "import spacy\nfrom spacy.util import registry\n"
        "nlp = spacy.blank('en'); nlp.add_pipe('elmo'); print(nlp.pipe_names)\n"
        f"print([registry.architectures.get(n).__name__ for n in {names!r}])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "['elmo']" in result.stdout
    assert "ElmoScalarMix" in result.stdout
    assert spacy.__version__.startswith("3.")
