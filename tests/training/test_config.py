"""The pretraining config: the shipped ones load, mistakes fail at load time with the key named."""
import pytest

from elmo_testing import DEMO_PRETRAIN_CONFIG, REPO
from spacy_elmo.training.config import load_config


def test_shipped_configs_load():
    demo = load_config(DEMO_PRETRAIN_CONFIG)
    assert demo.training.max_seconds > 0 and demo.head.type == "sampled"
    large = load_config(REPO / "configs" / "pretrain-gpu.cfg")
    assert large.model.lstm_dim == 4096 and large.model.projection_dim == 512
    assert large.training.mixed_precision


def test_overrides_apply_with_types_checked():
    config = load_config(DEMO_PRETRAIN_CONFIG, {"training.max_steps": 7, "model.n_layers": 3})
    assert config.training.max_steps == 7 and config.model.n_layers == 3


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"training.max_step": 7}, "unknown keys \\['max_step'\\]"),
        ({"model.lstm_size": 7}, "Unknown biLM configuration keys"),
        ({"training.max_steps": "ten"}, "max_steps = 'ten' is not of type int"),
        ({"training.dropout": 1.5}, "dropout must be in"),
        ({"head.type": "adaptive"}, "head.type must be"),
        ({"optimizer.name": "sgd"}, "optimizer.name must be"),
        ({"training.max_seconds": 0}, "set a budget"),
        ({"schedule.decay": "linear"}, "needs training.max_steps"),
        ({"batching.max_sentence_tokens": 10_000}, "must not exceed tokens_per_batch"),
        ({"training.device": "tpu"}, "training.device must be"),
        ({"training.device": "cudax"}, "training.device must be"),
        ({"model.lstm_dim": 512.5}, "\\[model\\] lstm_dim = 512.5 is not of type int"),
        ({"model.cell_clip": True}, "\\[model\\] cell_clip = True is not of type Optional"),
        ({"model.filters": [[1, "a"]]}, "\\[model\\] filters = .* must be a list of \\[width, count\\] integer pairs"),
        ({"model.token_encoder": "bytes"}, "token_encoder must be one of \\('characters', 'words'\\)"),
    ],
)
def test_mistakes_are_reported_at_load_time(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(DEMO_PRETRAIN_CONFIG, overrides)


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

    overrides = {"paths.corpus": str(toy_corpus), "training.max_seconds": 0, "training.max_steps": 1, "training.max_epochs": 0,
                 "training.eval_every": 1, "training.num_threads": 1}
    config = load_config(REPO / "configs" / name, overrides)
    done = pretrain(config, tmp_path / "out", progress_bar=False)
    assert done.step == 1 and done.best_dev_perplexity is not None
    assert load_model(tmp_path / "out" / "model-best").config == config.model
