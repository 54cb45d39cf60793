"""Device settings: one reading for the component, `dump`, `evaluate` and training."""

import pytest
import torch

from spacy_elmo.devices import INFERENCE_DEVICES, TRAINING_DEVICES, check_device, pick_device


@pytest.mark.parametrize("setting", ["cpu", "cuda", "cuda:0", "cuda:12"])
def test_training_spellings_pass_the_check(setting):
    check_device(setting, TRAINING_DEVICES)


@pytest.mark.parametrize("setting", ["tpu", "cudax", "cuda:", "cuda:-1", "CPU", " cpu", "", "mps", "auto", "cpu:0", 3, None])
def test_other_training_spellings_name_the_setting(setting):
    with pytest.raises(ValueError, match=r"training\.device must be one of cpu, cuda, cuda:N; got"):
        check_device(setting, TRAINING_DEVICES, name="training.device")


def test_auto_only_where_allowed():
    check_device("auto", TRAINING_DEVICES, auto=True)
    assert pick_device("auto", TRAINING_DEVICES, auto=True).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="got 'auto'"):
        pick_device("auto", INFERENCE_DEVICES)


def test_inference_takes_more_kinds_than_training():
    check_device("mps", INFERENCE_DEVICES)
    check_device("xpu:1", INFERENCE_DEVICES)
    check_device("cpu:0", INFERENCE_DEVICES)  # as torch.device takes it
    with pytest.raises(ValueError, match="'meta'"):
        check_device("meta", INFERENCE_DEVICES)


def test_cpu_resolves_to_the_cpu():
    assert pick_device("cpu", TRAINING_DEVICES) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("setting", ["cuda", "cuda:1"])
def test_a_gpu_that_is_not_there_is_an_error_naming_the_setting(setting):
    with pytest.raises(ValueError, match=rf"--device = '{setting}' asked for, but torch sees no CUDA device"):
        pick_device(setting, TRAINING_DEVICES, name="--device")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has an MPS device")
def test_an_mps_device_that_is_not_there_is_an_error():
    with pytest.raises(ValueError, match="sees no mps device"):
        pick_device("mps", INFERENCE_DEVICES)
