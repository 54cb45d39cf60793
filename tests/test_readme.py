"""The README's Python examples run as written, with the test model's files put in."""

import functools
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_examples_run(allennlp_fixture):
    blocks = python_blocks()
    assert len(blocks) >= 2
    replacements = {
        '"elmo_weights.hdf5"': repr(str(allennlp_fixture / "lm_weights.hdf5")),
        '"elmo_options.json"': repr(str(allennlp_fixture / "options.json")),
        '"weights.hdf5"': repr(str(allennlp_fixture / "lm_weights.hdf5")),
        '"options.json"': repr(str(allennlp_fixture / "options.json")),
    }
    namespaces = []
    for block in blocks:
        for placeholder, path in replacements.items():
            block = block.replace(placeholder, path)
        namespaces.append({})
        exec(compile(block, str(README), "exec"), namespaces[-1])
    component_example = next(ns for ns in namespaces if "doc" in ns)
    doc, other = component_example["doc"], component_example["other"]
    assert doc._.elmo.layers.shape == (3, len(doc), 32)
    assert doc[4].similarity(other[1]) < 0.999
    torch_example = next(ns for ns in namespaces if "out" in ns)
    assert tuple(torch_example["out"].layers.shape) == (3, 2, 4, 32)


def test_readme_project_section_is_what_spacy_project_document_writes(tmp_path):
    from weasel.cli.document import project_document

    copy = tmp_path / "README.md"
    copy.write_text(README.read_text(encoding="utf-8"), encoding="utf-8")
    project_document(README.parent, copy)
    assert copy.read_text(encoding="utf-8") == README.read_text(encoding="utf-8"), "run: python -m spacy project document . --output README.md"


def markdown_files():
    return [README, *sorted((README.parent / "docs").glob("*.md"))]


def prose(markdown: Path) -> str:
    """A markdown file's text without its fenced code blocks."""
    return re.sub(r"```.*?```", "", markdown.read_text(encoding="utf-8"), flags=re.S)


@functools.lru_cache(maxsize=None)
def anchors(markdown: Path) -> frozenset:
    """The anchors GitHub gives the headings of a markdown file (code blocks left out)."""
    headings = re.findall(r"^#{1,6} (.+)$", prose(markdown), flags=re.M)
    return frozenset(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings)


def test_every_relative_link_of_the_docs_resolves():
    broken = []
    for markdown in markdown_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(markdown)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (markdown.parent / path).resolve() if path else markdown
            if not linked.exists() or (anchor and anchor not in anchors(linked)):
                broken.append(f"{markdown.name}: {target}")
    assert not broken, broken


def test_anchor_rule_matches_githubs():
    assert anchors(README) >= {"the-twins-on-ud-english-ewt", "pretraining-a-bilm-on-your-own-text", "component-settings"}
