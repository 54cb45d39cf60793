"""How a training starts: `plan_start` is pure, so every case is a plain call."""

import dataclasses

import pytest

from elmo_testing import DEMO_PRETRAIN_CONFIG
from spacy_elmo.io import ModelFileError
from spacy_elmo.training.config import load_config
from spacy_elmo.training.start import FoundTraining, StartMode, find_training, plan_start

CORPUS = {"vocab": "aa", "shards": ["bb"]}
CONFIG = load_config(DEMO_PRETRAIN_CONFIG, {"schedule.decay": "constant"})  # any budget may change on resume


def checkpoint_of(config=CONFIG, world_size=1, corpus=CORPUS):
    """What `plan_start` reads of a checkpoint: its processes' RNG states, corpus and config."""
    return {"rng": [["state"]] * world_size, "corpus": dict(corpus), "config": config.to_dict()}


def found(checkpoint=None, has_outputs=True, problem=None, tmp="out"):
    from pathlib import Path

    return FoundTraining(Path(tmp), has_outputs, checkpoint, problem)


def with_training(config, **changes):
    return dataclasses.replace(config, training=dataclasses.replace(config.training, **changes))


def test_new_in_an_empty_folder_starts_afresh_and_clears_nothing():
    plan = plan_start(CONFIG, StartMode.NEW, found(has_outputs=False), CORPUS, 1)
    assert plan.config == CONFIG and plan.checkpoint is None and not plan.clear


def test_new_over_a_training_is_an_error_naming_the_folder_and_the_ways_out():
    with pytest.raises(ValueError, match="out already holds a training; pass --resume .* --overwrite"):
        plan_start(CONFIG, StartMode.NEW, found(), CORPUS, 1)


def test_overwrite_clears_and_starts_afresh():
    plan = plan_start(CONFIG, StartMode.OVERWRITE, found(), CORPUS, 1)
    assert plan.clear and plan.checkpoint is None


def test_resume_keeps_the_checkpoint_and_takes_a_new_budget():
    checkpoint = checkpoint_of()
    longer = with_training(CONFIG, max_seconds=CONFIG.training.max_seconds * 2, num_threads=1)
    plan = plan_start(longer, StartMode.RESUME, found(checkpoint), CORPUS, 1)
    assert plan.checkpoint is checkpoint and not plan.clear and plan.config == longer


@pytest.mark.parametrize(
    "checkpoint, config, message",
    [
        (checkpoint_of(world_size=2), CONFIG, "the checkpoint was written by 2 processes, this run has 1"),
        (checkpoint_of(corpus={**CORPUS, "vocab": "zz"}), CONFIG, "the corpus changed since the checkpoint \\(vocab differs\\)"),
        (checkpoint_of(), with_training(CONFIG, dropout=0.3), f"\\[training\\] dropout was {CONFIG.training.dropout}, is now 0.3"),
        (checkpoint_of(), dataclasses.replace(CONFIG, head=dataclasses.replace(CONFIG.head, n_samples=7)), "\\[head\\] n_samples was"),
    ],
)
def test_resume_refuses_what_does_not_fit(checkpoint, config, message):
    with pytest.raises(ValueError, match=f"cannot resume: {message}"):
        plan_start(config, StartMode.RESUME, found(checkpoint), CORPUS, 1)


def test_a_linear_decay_pins_its_horizon_only():
    over_steps = load_config(DEMO_PRETRAIN_CONFIG, {"schedule.decay": "linear", "schedule.horizon": "steps", "training.max_steps": 100})
    with pytest.raises(ValueError, match="\\[training\\] max_steps was 100, is now 200"):
        plan_start(with_training(over_steps, max_steps=200), StartMode.RESUME, found(checkpoint_of(over_steps)), CORPUS, 1)
    assert plan_start(with_training(over_steps, max_seconds=5.0), StartMode.RESUME, found(checkpoint_of(over_steps)), CORPUS, 1).checkpoint
    over_seconds = load_config(DEMO_PRETRAIN_CONFIG, {"schedule.decay": "linear", "schedule.horizon": "seconds"})
    with pytest.raises(ValueError, match="\\[training\\] max_seconds was 900.0, is now 5.0"):
        plan_start(with_training(over_seconds, max_seconds=5.0), StartMode.RESUME, found(checkpoint_of(over_seconds)), CORPUS, 1)
    assert plan_start(with_training(over_seconds, max_steps=50), StartMode.RESUME, found(checkpoint_of(over_seconds)), CORPUS, 1).checkpoint


def test_a_resumed_run_keeps_the_checkpoints_bias_init_which_only_a_fresh_head_uses():
    zeros = dataclasses.replace(CONFIG, head=dataclasses.replace(CONFIG.head, bias_init="zeros"))
    zipf = dataclasses.replace(CONFIG, head=dataclasses.replace(CONFIG.head, bias_init="log_uniform"))
    plan = plan_start(zipf, StartMode.RESUME, found(checkpoint_of(zeros)), CORPUS, 1)
    assert plan.checkpoint and plan.config.head.bias_init == "zeros"
    auto = plan_start(zipf, StartMode.AUTO, found(checkpoint_of(zeros)), CORPUS, 1)
    assert auto.checkpoint and not auto.clear and not auto.discarded


def test_with_init_from_the_model_shape_is_the_checkpoints():
    trained = dataclasses.replace(CONFIG, model=dataclasses.replace(CONFIG.model, n_layers=3))
    init = dataclasses.replace(CONFIG, paths=dataclasses.replace(CONFIG.paths, init_from="some/model"))
    plan = plan_start(init, StartMode.RESUME, found(checkpoint_of(dataclasses.replace(trained, paths=init.paths))), CORPUS, 1)
    assert plan.config.model.n_layers == 3


def test_an_unreadable_checkpoint_is_an_error_in_every_mode_that_reads_it():
    problem = ModelFileError("out/checkpoints/last.pt", "cut short; copy best.pt")
    for mode in (StartMode.RESUME, StartMode.AUTO):
        with pytest.raises(ModelFileError, match="cut short; copy best.pt"):
            plan_start(CONFIG, mode, found(problem=problem), CORPUS, 1)


def test_auto_resumes_what_fits_and_replaces_what_does_not():
    fits = plan_start(CONFIG, StartMode.AUTO, found(checkpoint_of()), CORPUS, 1)
    assert fits.checkpoint is not None and not fits.clear and not fits.discarded
    nothing = plan_start(CONFIG, StartMode.AUTO, found(None, has_outputs=False), CORPUS, 1)
    assert nothing.clear and nothing.checkpoint is None and not nothing.discarded
    uncheckpointed = plan_start(CONFIG, StartMode.AUTO, found(None), CORPUS, 1)  # said in the log, not replaced silently
    assert uncheckpointed.clear and uncheckpointed.discarded == "it holds no checkpoint to resume"
    changed = plan_start(with_training(CONFIG, seed=9), StartMode.AUTO, found(checkpoint_of()), CORPUS, 1)
    assert changed.clear and changed.checkpoint is None and "[training] seed was 0, is now 9" in changed.discarded


def test_the_flags_exclude_each_other():
    assert StartMode.from_flags(False, False, False) is StartMode.NEW
    assert StartMode.from_flags(False, False, True) is StartMode.AUTO
    with pytest.raises(ValueError, match="exclude each other"):
        StartMode.from_flags(True, True, False)


def test_find_training_reads_last_pt_only_when_the_mode_may_resume(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"junk")
    assert find_training(tmp_path, StartMode.NEW) == FoundTraining(tmp_path, True)
    assert find_training(tmp_path, StartMode.OVERWRITE).problem is None
    damaged = find_training(tmp_path, StartMode.RESUME).problem
    assert damaged is not None and "there is no" in str(damaged) and "best.pt" in str(damaged)
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"junk")
    assert "copy it over" in str(find_training(tmp_path, StartMode.AUTO).problem)


def test_find_training_in_an_empty_or_missing_folder(tmp_path):
    assert find_training(tmp_path / "missing", StartMode.AUTO) == FoundTraining(tmp_path / "missing", False)
    missing = find_training(tmp_path, StartMode.RESUME).problem
    assert missing is not None and "checkpoint not found" in str(missing)


def test_a_checkpoint_written_before_a_fingerprint_key_was_added_resumes_on_the_keys_it_holds():
    current = {**CORPUS, "shard_digests": ["cc"], "dev_digest": "dd", "init_from": {"weights.safetensors": "ee"}}
    plan = plan_start(CONFIG, StartMode.RESUME, found(checkpoint_of(corpus=CORPUS)), current, 1)
    assert plan.checkpoint is not None and not plan.clear
    with pytest.raises(ValueError, match="the corpus changed since the checkpoint \\(shard_digests differs\\)"):
        plan_start(CONFIG, StartMode.RESUME, found(checkpoint_of(corpus={**current, "shard_digests": ["zz"]})), current, 1)


def test_a_path_spelled_otherwise_resumes_and_an_init_model_set_or_unset_does_not():
    respelled = dataclasses.replace(CONFIG, paths=dataclasses.replace(CONFIG.paths, corpus=CONFIG.paths.corpus + "/"))
    assert plan_start(respelled, StartMode.RESUME, found(checkpoint_of()), CORPUS, 1).config == respelled
    adapted = dataclasses.replace(CONFIG, paths=dataclasses.replace(CONFIG.paths, init_from="base/model-best"))
    with pytest.raises(ValueError, match="cannot resume: \\[paths\\] init_from was None, is now 'base/model-best'"):
        plan_start(adapted, StartMode.RESUME, found(checkpoint_of()), CORPUS, 1)


def test_a_damaged_best_pt_read_in_place_of_a_missing_last_pt_is_an_error_naming_both(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"junk")
    problem = str(find_training(tmp_path, StartMode.AUTO).problem)  # read, not passed over
    assert "best.pt" in problem and "last.pt either: --overwrite starts afresh" in problem
