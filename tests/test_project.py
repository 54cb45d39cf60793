"""The spaCy project, end to end on a toy text: corpus -> pretrain -> evaluate -> assemble ->
package, then the package installed into a fresh venv gives the assembled pipeline's vectors."""

import json
import subprocess

import numpy
import spacy

from elmo_testing import copy_project, install_in_fresh_venv, project_run, write_tiny_pretrain_config, write_toy_text

VECTORS_SCRIPT = "import numpy, spacy, sys; numpy.save(sys.argv[1], spacy.load('en_toy')(sys.argv[2])._.elmo.layers)"


def test_project_workflow_builds_an_installable_pipeline(tmp_path):
    project = copy_project(tmp_path / "project")
    write_toy_text(project / "toy.txt", n_sentences=400)
    write_tiny_pretrain_config(project / "configs" / "tiny.cfg", "corpus", max_steps=20)
    variables = [
        "--vars.text",
        "toy.txt",
        "--vars.config",
        "configs/tiny.cfg",
        "--vars.name",
        "toy",
        "--vars.dev_fraction",
        "0.1",
        "--vars.test_fraction",
        "0.1",
    ]
    for command in ("corpus", "pretrain", "evaluate", "assemble", "package", "report"):
        project_run(project, command, *variables)
    report = (project / "packages" / "en_toy-0.1.0" / "report.html").read_text(encoding="utf-8")
    assert "<h2>Training</h2>" in report and "data:image/png;base64," in report  # the curves, from training/metrics.jsonl
    test_figures = json.loads((project / "metrics" / "test.json").read_text())
    assert 1.0 < test_figures["mean"] < 1000 and test_figures["sentences"] > 0
    assert "Skipping 'pretrain'" in project_run(project, "pretrain", *variables)  # nothing changed

    sdist = next((project / "packages").glob("en_toy-0.1.0/dist/en_toy-0.1.0.tar.gz"))
    python = install_in_fresh_venv(tmp_path / "venv", sdist)
    text = "The old man watches the water ."
    subprocess.run([str(python), "-c", VECTORS_SCRIPT, str(tmp_path / "v.npy"), text], check=True, timeout=300, cwd=tmp_path)
    expected = spacy.load(project / "pipelines" / "en_toy")(text)._.elmo.layers
    # equal up to float32 rounding: the thread count of this process may differ from the venv's
    numpy.testing.assert_allclose(numpy.load(tmp_path / "v.npy"), expected, rtol=0, atol=1e-6)
