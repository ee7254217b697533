"""The generated file's config dataclass: one field per size and constant, named from the
diagram's ``code_form`` (else its readable name), the binding's values as defaults; modules take
the config (or nothing) and no size keywords; every field name binds its symbol on the command
line (``--size NAME=N``) and in ``Spec.bind``."""
from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from ncdc import interpreter
from ncdc.codegen import generate, load_module
from ncdc.ir.numeric import FreeNumeric
from tests.conftest import TRANSFORMER, loaded
from tests.lazy import torch

SWITCHES = {"self", "config", "quant", "stand_in", "static_shapes"}


@pytest.fixture(scope="module")
def whole(bundled):
    env = bundled.bind("tiny").env
    g = generate(interpreter.prefix(bundled.data), env, module_name="deepseek_v41_flash",
                 size_names=bundled.size_names())
    return env, g, load_module(g.source)


def _config_class(g):
    tree = ast.parse(g.source)
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == g.config_name)


def test_one_dataclass_first_with_every_size(whole):
    env, g, mod = whole
    tree = ast.parse(g.source)
    first = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    assert first.name == g.config_name == "DeepseekV41FlashConfig"
    assert [ast.unparse(d) for d in first.decorator_list] == ["dataclass"]
    cfg = getattr(mod, g.config_name)()
    names = [f.name for f in dataclasses.fields(cfg)]
    assert len(names) == len(set(names)) == len(g.config_fields)
    # named from the diagram's code_form where it has one
    for wanted in ("hidden_width", "heads", "window_size", "latent_width", "experts", "streams"):
        assert wanted in names, wanted
    assert not any(n.endswith("_2") for n in names)
    for field, sym in g.config_fields.items():
        assert isinstance(sym, FreeNumeric)
        assert getattr(cfg, field) == pytest.approx(float(env.number(sym)))
    # the LaTeX symbol stands beside each field
    lines = g.source.splitlines()
    for node in _config_class(g).body[1:]:
        sym = g.config_fields[node.target.id]
        assert lines[node.lineno - 1].split("# ", 1)[1].startswith(sym.label)


def test_no_constructor_takes_a_size_keyword(whole):
    _, g, mod = whole
    classes = [n.name for n in ast.parse(g.source).body if isinstance(n, ast.ClassDef)
               and n.name not in (g.config_name, "Linear", "Module", "StoredWeight")]
    assert len(classes) > 10
    for name in classes:
        params = set(inspect.signature(getattr(mod, name).__init__).parameters)
        assert params <= SWITCHES, (name, params - SWITCHES)


def test_config_sizes_reach_the_modules(bundled):
    env = bundled.bind("tiny").env
    g = generate(bundled.block("Expert Gate"), env)
    mod = load_module(g.source)
    cfg = getattr(mod, g.config_name)(experts=6, hidden_width=16)
    module = getattr(mod, g.class_name)(cfg)
    assert module.config is cfg
    assert tuple(module.w_r.weight.shape) == (6, 16)
    assert tuple(getattr(mod, g.class_name)().w_r.weight.shape) == (8, 64)
    gates, live = module(torch.randn(3, 16))
    assert gates.shape == (3, 6) and int(live.sum()) == 3 * cfg.k


def test_every_field_name_binds_its_symbol(whole, bundled):
    """``--size NAME=N`` (``Spec.bind``) with a config field name binds exactly that field's
    symbol, for code forms (``hidden_width``) and readable names (``hat_v``, ``T_1``)."""
    env, g, _ = whole
    base = bundled.bind("tiny").env
    for field, sym in g.config_fields.items():
        value = base.number(sym)
        new = value + 3 if float(value).is_integer() else value * 2
        kind = "sizes" if float(value).is_integer() else "constants"
        changed = bundled.bind("tiny", **{kind: {field: new}}).env
        moved = {s for s in g.config_fields.values() if changed.number(s) != base.number(s)}
        assert moved == {sym}, field


def test_namesakes_get_one_field_each_named_by_their_block():
    spec = loaded(TRANSFORMER)
    g = generate(spec.data, spec.bind("tiny").env, size_names=spec.size_names())
    names = set(g.config_fields)
    assert {"k_L_q", "k_L_v"} <= names
    assert not any(n.endswith("_2") for n in names)
    for field, sym in g.config_fields.items():
        env = spec.bind("tiny", sizes={field: 5}).env
        assert env.number(sym) == 5, field


def test_compile_size_takes_the_field_names(tmp_path):
    """``ncdc compile --size FIELD=N`` with the config's own field names (a code form and a
    readable name) writes those values as the config's defaults."""
    from ncdc.cli import main

    out = tmp_path / "gate.py"
    assert main(["compile", "--block", "Expert Gate", "--size", "experts=16",
                 "--constant", "varepsilon_r=0.001", "-o", str(out)]) == 0
    src = out.read_text()
    assert "    experts: int = 16  # e (experts_size)" in src
    assert "    varepsilon_r: float = 0.001  #" in src
