"""`spacy-elmo.epoch_times.v1`: a line per finished epoch."""

import json

from spacy.util import registry


def test_a_line_per_finished_epoch_with_its_steps_and_seconds(tmp_path, monkeypatch):
    import spacy_elmo.pipeline.callbacks as callbacks

    clock = iter([10.0, 11.0, 12.5, 20.0, 21.0, 30.0])
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    path = tmp_path / "logs" / "epochs.jsonl"
    before_update = registry.resolve({"cb": {"@callbacks": "spacy-elmo.epoch_times.v1", "path": str(path)}})["cb"]
    assert not path.exists()  # nothing written when the config is only resolved
    for step, epoch in [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 2)]:
        before_update(None, {"step": step, "epoch": epoch})
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["epoch"], r["steps"], r["seconds"]) for r in records] == [(0, 3, 10.0), (1, 2, 10.0)]
    assert all(r["peak_rss_mb"] > 1 for r in records)
