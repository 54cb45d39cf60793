"""Training progress as checkpoints store it, including those of earlier versions."""

from spacy_elmo.training.checkpoint import Progress, ThroughputWindow
from spacy_elmo.training.data import DataPosition


def test_progress_round_trips_through_its_dict():
    progress = Progress(step=7, tokens=90, window=ThroughputWindow(1.5, 20, 18, 0.25, 1), skipped_steps=3, bad_streak=1)
    assert Progress.from_dict(progress.to_dict()) == progress


def test_a_checkpoint_of_an_earlier_version_with_a_bare_window_list_loads():
    data = Progress(step=7).to_dict()
    del data["window"]
    data.update(window=[1.5, 20.0, 18.0, 0.25], window_skipped=2)
    restored = Progress.from_dict(data)
    assert restored.window == ThroughputWindow(loss_sum=1.5, predictions=20, tokens=18, seconds=0.25, skipped=2)
    assert restored.step == 7 and restored.position == DataPosition()


def test_a_window_adds_up_steps():
    window = ThroughputWindow()
    window.add_step(2.0, 10, 9, 0.5)
    window.add_step(1.0, 6, 5, 0.25)
    assert window == ThroughputWindow(3.0, 16, 14, 0.75, 0)
