"""What every test module that launches gloo process groups shares."""
import pytest

GLOO = [
    pytest.mark.usefixtures("gloo"),
    pytest.mark.filterwarnings("ignore:.*seeded stand-in values"),
]
"""Module marks: skip without gloo (the ``gloo`` fixture of tests/conftest.py, so that collecting
the module imports no torch); the stand-in weights' warning is expected."""

LAUNCH_TIMEOUT = 600  # seconds per launch (generous: the machine may be shared)
