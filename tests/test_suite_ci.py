"""The suite's own rules (tests/conftest.py): under CI a browser test of ``ncdc view``
(``tests/test_view*.py``) that would skip fails; elsewhere skips stay skips, with their reason
in the summary."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text(encoding="utf-8")
BODY = """
import pytest

@pytest.fixture
def browser():
    pytest.skip("no Chromium installed")

def test_page(browser):
    pass

@pytest.mark.skipif(True, reason="not here")
def test_marked():
    pass

def test_runs():
    pass
"""


@pytest.mark.parametrize("ci", ["true", "1", None, "false", "0"])
def test_a_browser_test_fails_under_ci_instead_of_skipping(pytester, monkeypatch, ci):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_view_page=BODY, test_other=BODY)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    res = pytester.runpytest_inprocess("-rfEs", "-p", "no:cacheprovider")
    if ci in ("true", "1"):
        # setup fails (an error, as pytest names it); test_other's skips stay skips
        res.assert_outcomes(passed=2, errors=2, skipped=2)
        assert res.ret == pytest.ExitCode.TESTS_FAILED
        res.stdout.fnmatch_lines(["*CI is set, so this browser test may not skip: no Chromium*"])
        assert "test_view_page.py::test_marked" in res.stdout.str()
    else:
        res.assert_outcomes(passed=2, skipped=4)
        assert res.ret == pytest.ExitCode.OK
        res.stdout.fnmatch_lines(["SKIPPED*no Chromium installed*"])
