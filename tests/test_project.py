"""The spaCy project, end to end on a toy text: corpus -> pretrain -> evaluate -> assemble ->
package, then the package installed into a fresh venv gives the assembled pipeline's vectors."""
import json
import shutil
import subprocess
import sys

import numpy
import spacy

from elmo_testing import REPO, write_tiny_pretrain_config, write_toy_text

VECTORS_SCRIPT = "import numpy, spacy, sys; numpy.save(sys.argv[1], spacy.load('en_toy')(sys.argv[2])._.elmo.layers)"


def project_run(project, command, *args):
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "project", "run", command, str(project), *args], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_project_workflow_builds_an_installable_pipeline(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name in ("project.yml", "configs", "scripts"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, project / name)
    write_toy_text(project / "toy.txt", n_sentences=400)
    config = write_tiny_pretrain_config(project / "configs" / "tiny.cfg", "corpus", max_steps=20)
    variables = ["--vars.text", "toy.txt", "--vars.config", "configs/tiny.cfg", "--vars.name", "toy", "--vars.dev_fraction", "0.1", "--vars.test_fraction", "0.1"]
    assert config.is_file()
    for command in ("corpus", "pretrain", "evaluate", "assemble", "package"):
        project_run(project, command, *variables)
    test_figures = json.loads((project / "metrics" / "test.json").read_text())
    assert 1.0 < test_figures["mean"] < 1000 and test_figures["sentences"] > 0
    assert "Skipping 'pretrain'" in project_run(project, "pretrain", *variables)  # nothing changed

    sdist = next((project / "packages").glob("en_toy-0.1.0/dist/en_toy-0.1.0.tar.gz"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["torch==2.13.0", str(REPO)], check=True, timeout=1200)
    subprocess.run(pip + [str(sdist)], check=True, timeout=600)
    text = "The old man watches the water ."
    subprocess.run([str(venv / "bin" / "python"), "-c", VECTORS_SCRIPT, str(tmp_path / "v.npy"), text], check=True, timeout=300, cwd=tmp_path)
    expected = spacy.load(project / "pipelines" / "en_toy")(text)._.elmo.layers
    numpy.testing.assert_array_equal(numpy.load(tmp_path / "v.npy"), expected)
