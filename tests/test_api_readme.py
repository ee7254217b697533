"""The README's Python examples run as they stand, each in a fresh namespace."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    api = text[text.index("## Python API"):]
    return re.findall(r"```python\n(.*?)```", api, re.DOTALL)


def test_readme_has_one_example_per_entry_point():
    blocks = python_examples()
    joined = "\n".join(blocks)
    for entry in ("ncdc.load(", ".validate(", ".block(", ".site(", ".bind(", ".params(",
                  "ncdc.interpret(", "ncdc.compile_torch(", "except ncdc."):
        assert entry in joined, entry
    assert len(blocks) >= 5


@pytest.mark.parametrize("k", range(len(python_examples())))
def test_readme_example_runs(k, capsys):
    code = python_examples()[k]
    code_obj = compile(code, f"README.md python example {k + 1}", "exec")
    exec(code_obj, {"__name__": "__readme__"})  # noqa: S102 - the README is ours
    printed = capsys.readouterr().out
    # every "# value" comment right after a print(...) names what it prints
    for line in code.splitlines():
        m = re.match(r"\s*print\(.*\)\s+# (.+)$", line)
        if m:
            expected = m.group(1).split(" ...")[0].strip()
            assert expected in printed, (expected, printed)
