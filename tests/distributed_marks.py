"""What every test module that launches gloo process groups shares."""
import pytest
import torch

GLOO = [
    pytest.mark.skipif(not torch.distributed.is_available()
                       or not torch.distributed.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
    pytest.mark.filterwarnings("ignore:.*seeded stand-in values"),
]
"""Module marks: skip without gloo; the stand-in weights' warning is expected."""

LAUNCH_TIMEOUT = 600  # seconds per launch (generous: the machine may be shared)
