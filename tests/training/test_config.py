"""The pretraining config: the shipped ones load, mistakes fail at load time with the key named."""

import re

import pytest

from elmo_testing import DEMO_PRETRAIN_CONFIG, REPO
from spacy_elmo.training.config import TrainingSettings, load_config, resumable_keys


def test_shipped_configs_load():
    demo = load_config(DEMO_PRETRAIN_CONFIG)
    assert demo.training.max_seconds > 0 and demo.head.type == "sampled"
    large = load_config(REPO / "configs" / "pretrain-gpu.cfg")
    assert large.model.lstm_dim == 4096 and large.model.projection_dim == 512
    assert large.training.mixed_precision


def test_overrides_apply_with_types_checked():
    config = load_config(DEMO_PRETRAIN_CONFIG, {"training.max_steps": 7, "model.n_layers": 3})
    assert config.training.max_steps == 7 and config.model.n_layers == 3


SECTION_MISTAKES = {
    # section: (misspelt key, mistyped value, out-of-range value)
    "paths": ("paths.corpu", {"paths.corpus": 3}, None),
    "model": ("model.lstm_size", {"model.lstm_dim": 512.5}, {"model.n_layers": 0}),
    "head": ("head.n_sample", {"head.n_samples": "many"}, {"head.n_samples": 0}),
    "optimizer": ("optimizer.lr", {"optimizer.learning_rate": "0.1"}, {"optimizer.beta2": 1.0}),
    "schedule": ("schedule.warmup", {"schedule.warmup_steps": 1.5}, {"schedule.final_fraction": 1.5}),
    "batching": ("batching.tokens", {"batching.bucket_batches": True}, {"batching.tokens_per_batch": 0}),
    "training": ("training.max_step", {"training.max_steps": "ten"}, {"training.dropout": 1.5}),
}


@pytest.mark.parametrize("section", sorted(SECTION_MISTAKES))
def test_a_misspelt_key_in_each_section_is_named(section):
    key = SECTION_MISTAKES[section][0]
    with pytest.raises(ValueError, match=rf"pretrain-demo.cfg: \[{section}\] unknown key '{key.split('.')[1]}'; expected one of \["):
        load_config(DEMO_PRETRAIN_CONFIG, {key: 7})


@pytest.mark.parametrize("section", sorted(SECTION_MISTAKES))
def test_a_mistyped_value_in_each_section_is_named(section):
    ((key, value),) = SECTION_MISTAKES[section][1].items()
    with pytest.raises(ValueError, match=rf"pretrain-demo.cfg: \[{section}\] {key.split('.')[1]} = {re.escape(repr(value))}: Input should be a valid"):
        load_config(DEMO_PRETRAIN_CONFIG, {key: value})


@pytest.mark.parametrize("section", sorted(s for s, mistakes in SECTION_MISTAKES.items() if mistakes[2]))
def test_an_out_of_range_value_in_each_section_is_named(section):
    ((key, value),) = SECTION_MISTAKES[section][2].items()
    with pytest.raises(ValueError, match=rf"pretrain-demo.cfg: \[{section}\] .*{key.split('.')[1]}"):
        load_config(DEMO_PRETRAIN_CONFIG, {key: value})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"training.dropout": 1.5}, "\\[training\\] dropout = 1.5: Input should be less than 1"),
        ({"training.weight_drop": -0.1}, "\\[training\\] weight_drop = -0.1: Input should be greater than or equal to 0"),
        ({"training.max_steps": -1}, "\\[training\\] max_steps = -1: Input should be greater than or equal to 0"),
        ({"training.mixed_precision": 1}, "\\[training\\] mixed_precision = 1: Input should be true, false or 'auto'"),
        ({"head.type": "adaptive"}, "\\[head\\] type = 'adaptive': Input should be 'full' or 'sampled'"),
        ({"head.bias_init": "zipf"}, "\\[head\\] bias_init = 'zipf': Input should be 'zeros' or 'log_uniform'"),
        ({"optimizer.name": "sgd"}, "\\[optimizer\\] name = 'sgd': Input should be 'adam' or 'adagrad'"),
        ({"schedule.decay": "cosine"}, "\\[schedule\\] decay = 'cosine': Input should be 'constant', 'linear' or 'inverse_sqrt'"),
        ({"training.max_seconds": 0}, "\\[training\\] set a budget"),
        ({"schedule.horizon": "steps"}, "needs training.max_steps \\(schedule.horizon = 'steps'\\)"),
        ({"schedule.decay_start": 1.0}, "\\[schedule\\] decay_start = 1.0: Input should be less than 1"),
        ({"schedule.decay": "linear", "schedule.horizon": "seconds", "training.max_seconds": 0, "training.max_epochs": 1}, "needs training.max_seconds"),
        ({"schedule.horizon": "minutes"}, "\\[schedule\\] horizon = 'minutes': Input should be 'steps' or 'seconds'"),
        ({"batching.max_sentence_tokens": 10_000}, "\\[batching\\] max_sentence_tokens must not exceed tokens_per_batch"),
        ({"training.device": "tpu"}, "\\[training\\] device must be one of cpu, cuda, cuda:N, auto; got 'tpu'"),
        ({"training.device": "cudax"}, "\\[training\\] device must be one of"),
        ({"model.cell_clip": True}, "\\[model\\] cell_clip = True: Input should be a valid number"),
        ({"model.filters": [[1, "a"]]}, "\\[model\\] filters.0.1 = 'a': Input should be a valid integer"),
        ({"model.filters": [[1, 2, 3]]}, "\\[model\\] filters.0 = \\(1, 2, 3\\): Tuple should have at most 2 items"),
        ({"model.token_encoder": "bytes"}, "\\[model\\] token_encoder = 'bytes': Input should be 'characters' or 'words'"),
        ({"model.n_characters": 300}, "\\[model\\] .*n_characters must be 261 or 262, got 300"),
        ({"paths.init_from": 3}, "\\[paths\\] init_from = 3: Input should be a valid string"),
        ({"optimizer.learning_rate": float("inf")}, "\\[optimizer\\] learning_rate = inf: Input should be a finite number"),
        ({"optimizer.eps": float("inf")}, "\\[optimizer\\] eps = inf: Input should be a finite number"),
        ({"training.seed": 2**63 - 1}, "\\[training\\] seed = 9223372036854775807: Input should be less than 4294967296"),
        ({"training.seed": -5}, "\\[training\\] seed = -5: Input should be greater than or equal to 0"),
    ],
)
def test_mistakes_are_reported_at_load_time(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(DEMO_PRETRAIN_CONFIG, overrides)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError) as info:
        load_config(DEMO_PRETRAIN_CONFIG, {"model.lstm_dim": "x", "training.dropout": 2.0, "head.type": "x"})
    assert all(f"[{section}]" in str(info.value) for section in ("model", "training", "head"))


def test_a_legacy_n_characters_key_still_loads():
    assert load_config(DEMO_PRETRAIN_CONFIG, {"model.n_characters": 261}).model == load_config(DEMO_PRETRAIN_CONFIG).model


def test_sections_built_in_code_are_validated_too():
    with pytest.raises(ValueError, match="less than 1"):
        TrainingSettings(max_steps=1, dropout=1.0)
    with pytest.raises(ValueError, match="valid integer"):
        TrainingSettings(max_steps="1")  # type: ignore[arg-type]


def test_resumable_keys_are_the_budget_machine_reporting_and_tolerance():
    assert set(resumable_keys()) == {
        "max_steps",
        "max_seconds",
        "max_epochs",
        "device",
        "mixed_precision",
        "num_threads",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "max_bad_steps",
    }


def test_unknown_section_and_missing_file(tmp_path):
    path = tmp_path / "bad.cfg"
    path.write_text("[trainer]\nmax_steps = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown sections \\['trainer'\\]"):
        load_config(path)
    with pytest.raises(ValueError, match="not found"):
        load_config(tmp_path / "missing.cfg")


CPU_CONFIGS = sorted(p.name for p in (REPO / "configs").glob("pretrain-*.cfg") if p.name != "pretrain-gpu.cfg")


@pytest.mark.parametrize("name", CPU_CONFIGS)
def test_every_shipped_cpu_config_trains_a_step_at_its_own_shape(name, toy_corpus, tmp_path):
    """pretrain-gpu.cfg (120M parameters) only loads, above; every other config trains."""
    from spacy_elmo.io import load_model
    from spacy_elmo.training.trainer import pretrain

    # one step stops the run first; each config keeps its own max_seconds (a decay's horizon)
    overrides = {"paths.corpus": str(toy_corpus), "training.max_steps": 1, "training.max_epochs": 0, "training.eval_every": 1, "training.num_threads": 1}
    config = load_config(REPO / "configs" / name, overrides)
    done = pretrain(config, tmp_path / "out", progress_bar=False)
    assert done.step == 1 and done.best_dev_perplexity is not None
    assert load_model(tmp_path / "out" / "model-best").config == config.model
