"""Learning-rate schedules and optimizer choice."""

import math

import pytest
import torch

from spacy_elmo.training.config import OptimizerSettings, ScheduleSettings, TrainingSettings
from spacy_elmo.training.optim import learning_rate_factor, make_optimizer


def test_warmup_then_constant():
    schedule = ScheduleSettings(warmup_steps=4)
    assert [learning_rate_factor(schedule, TrainingSettings(max_epochs=1), s, 0.0) for s in (1, 2, 4, 5, 100)] == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_linear_decay_reaches_the_final_fraction_at_max_steps():
    schedule = ScheduleSettings(warmup_steps=10, decay="linear", final_fraction=0.1)
    training = TrainingSettings(max_steps=110)
    assert learning_rate_factor(schedule, training, 10, 0.0) == 1.0
    assert learning_rate_factor(schedule, training, 60, 0.0) == pytest.approx(0.55)
    assert learning_rate_factor(schedule, training, 110, 0.0) == pytest.approx(0.1)
    assert learning_rate_factor(schedule, training, 500, 0.0) == pytest.approx(0.1)


def test_linear_decay_over_seconds_follows_the_clock():
    schedule = ScheduleSettings(warmup_steps=10, decay="linear", horizon="seconds", final_fraction=0.0)
    training = TrainingSettings(max_seconds=900.0)
    assert learning_rate_factor(schedule, training, 11, elapsed=0.0) == 1.0
    assert learning_rate_factor(schedule, training, 11, elapsed=450.0) == pytest.approx(0.5)
    assert learning_rate_factor(schedule, training, 11, elapsed=1000.0) == 0.0
    assert learning_rate_factor(schedule, training, 5, elapsed=800.0) == 0.5  # warmup is in steps


def test_a_linear_decay_spans_its_horizon_only():
    over_steps = ScheduleSettings(decay="linear", horizon="steps")
    over_seconds = ScheduleSettings(decay="linear", horizon="seconds")
    training = TrainingSettings(max_steps=100, max_seconds=200.0)
    assert learning_rate_factor(over_steps, training, 25, elapsed=150.0) == pytest.approx(0.75)
    assert learning_rate_factor(over_seconds, training, 25, elapsed=150.0) == pytest.approx(0.25)
    assert learning_rate_factor(ScheduleSettings(decay="constant"), training, 75, elapsed=150.0) == 1.0


def test_a_decay_start_holds_the_rate_then_decays_over_the_rest_of_the_horizon():
    schedule = ScheduleSettings(warmup_steps=10, decay="linear", decay_start=0.8, final_fraction=0.0)
    training = TrainingSettings(max_steps=110)
    assert [learning_rate_factor(schedule, training, s, 0.0) for s in (5, 10, 60, 90)] == [0.5, 1.0, 1.0, 1.0]
    assert learning_rate_factor(schedule, training, 100, 0.0) == pytest.approx(0.5)
    assert learning_rate_factor(schedule, training, 110, 0.0) == pytest.approx(0.0)
    over_seconds = ScheduleSettings(decay="linear", horizon="seconds", decay_start=0.75, final_fraction=0.2)
    seconds = TrainingSettings(max_seconds=900.0)
    assert learning_rate_factor(over_seconds, seconds, 50, elapsed=600.0) == 1.0
    assert learning_rate_factor(over_seconds, seconds, 50, elapsed=787.5) == pytest.approx(0.6)
    assert learning_rate_factor(over_seconds, seconds, 50, elapsed=2000.0) == pytest.approx(0.2)


def test_inverse_sqrt_decay_after_warmup():
    schedule = ScheduleSettings(warmup_steps=100, decay="inverse_sqrt")
    training = TrainingSettings(max_epochs=1)
    assert learning_rate_factor(schedule, training, 100, 0.0) == 1.0
    assert learning_rate_factor(schedule, training, 400, 0.0) == pytest.approx(math.sqrt(100 / 400))


def test_optimizers_follow_the_settings():
    params = [torch.nn.Parameter(torch.zeros(3))]
    adagrad = make_optimizer(OptimizerSettings(name="adagrad", learning_rate=0.2, initial_accumulator=1.0), params)
    assert isinstance(adagrad, torch.optim.Adagrad)
    assert adagrad.defaults["initial_accumulator_value"] == 1.0 and adagrad.defaults["lr"] == 0.2
    adam = make_optimizer(OptimizerSettings(name="adam", learning_rate=0.001, beta2=0.98), params)
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.9, 0.98)


@pytest.mark.parametrize("name, kind", [("adagrad", "Adagrad"), ("adam", "Adam")])
def test_a_torch_without_the_fused_step_gets_the_multi_tensor_one(name, kind, monkeypatch):
    real = getattr(torch.optim, kind)

    class WithoutFused(real):  # as torch before 2.4 on the CPU, or a device without the kernel
        def __init__(self, params, fused=None, **options):
            if fused:
                raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
            super().__init__(params, **options)

    settings = OptimizerSettings(name=name, learning_rate=0.1)
    fused = make_optimizer(settings, [torch.nn.Parameter(torch.ones(3))])
    assert fused.defaults["fused"] is True
    monkeypatch.setattr(torch.optim, kind, WithoutFused)
    param = torch.nn.Parameter(torch.ones(3))
    fallback = make_optimizer(settings, [param])
    assert fallback.defaults["foreach"] is True and not fallback.defaults["fused"]
    param.grad = torch.ones(3)
    fallback.step()
    assert torch.all(param < 1)
