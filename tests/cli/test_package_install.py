"""End to end (slow): convert -> spacy package (sdist) -> pip install into a fresh venv -> spacy.load."""

import subprocess
import sys

import numpy
import pytest
import spacy
from typer.testing import CliRunner

from elmo_testing import install_in_fresh_venv
from spacy_elmo.cli import app


@pytest.mark.slow
def test_packaged_pipeline_installs_and_loads_with_equal_vectors(tmp_path, allennlp_fixture):
    result = CliRunner().invoke(app, ["convert", str(allennlp_fixture / "options.json"), str(allennlp_fixture / "lm_weights.hdf5"), str(tmp_path / "pipe")])
    assert result.exit_code == 0, result.output
    (tmp_path / "dist").mkdir()
    subprocess.run(
        [sys.executable, "-m", "spacy", "package", str(tmp_path / "pipe"), str(tmp_path / "dist"), "--build", "sdist"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    sdist = next((tmp_path / "dist").glob("en_elmo-0.0.0/dist/*.tar.gz"))
    python = install_in_fresh_venv(tmp_path / "venv", sdist)
    text = "I sat by the bank of the river ."
    code = f"import spacy, numpy; nlp = spacy.load('en_elmo'); numpy.save({str(tmp_path / 'vectors.npy')!r}, nlp({text!r})._.elmo.layers)"
    subprocess.run([str(python), "-c", code], check=True, timeout=300, cwd=tmp_path)
    expected = spacy.load(tmp_path / "pipe")(text)._.elmo.layers
    numpy.testing.assert_array_equal(numpy.load(tmp_path / "vectors.npy"), expected)
