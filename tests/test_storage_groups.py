"""Every array a generated module holds in an MX format groups its block scales as the reference
interpreter does, on non-zero random weights (biases included): the module loaded through
``load_interpreter_params`` and through the checkpoint loader (``ncdc.checkpoint``), the
interpreter under the same policy, both against an encoding written here from docs/format.md / the
storage policy's docstring with ml_dtypes; the module's bytes against the cost model's; and
``ncdc check --weights`` drawing non-zero biases, so that it would catch a grouping error."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.checkpoint.module import build_meta, interpreter_arrays, materialize
from ncdc.codegen.generate import generate, instantiate, load_module
from ncdc.interpreter.storage_policy import StoragePolicy, apply_policy
from ncdc.ir.cost import cost
from ncdc.ir.datatypes import kind
from ncdc.ir.operators import Linear
from ncdc.ir.params import param_specs
from ncdc.verify.check import check_morphism
from tests.lazy import ml_dtypes, torch

pytestmark = pytest.mark.filterwarnings("ignore:.*seeded stand-in values")

ELEMENT = {"mxfp8": ("float8_e4m3fn", 448.0), "mxfp4": ("float4_e2m1fn", 6.0)}
"""format -> (its element type in ml_dtypes, its largest element)."""
# the blocks holding every learned array of the tiny model (the layers, the Engram, the
# embedding): Linear biases [4, 4], tables, gains, grouped and stacked weights of 3 to 5 dims
BLOCKS = ["Sliding Window Layer", "Engram of Layer 1", "Embedding"]


def run_lead(spec) -> int:
    """How many leading axes the runs of block scales cover: a Linear weight ``[in..., out...]``
    groups along the input axes it contracts (flattened), every other array along its
    trailing axis (0)."""
    if spec.role == "weight" and isinstance(spec.site.operator, Linear):
        return sum(len(w.target) for w in spec.site.input_weaves)
    return 0


def mx_values(x: np.ndarray, fmt: str, lead: int) -> np.ndarray:
    """``x`` held in ``fmt`` and read back: runs (see :func:`run_lead`) cut into groups of 32
    from their start, one E8M0 scale ``2^ceil(log2(max(amax, 1e-4) / top))`` per group, the
    elements rounded to E4M3 / E2M1 by ml_dtypes."""
    elem, top = ELEMENT[fmt]
    elem = getattr(ml_dtypes, elem)
    if lead:
        runs = x.reshape(math.prod(x.shape[:lead]), -1).T
    else:
        runs = x.reshape(-1, x.shape[-1])
    out = np.empty_like(runs)
    for g0 in range(0, runs.shape[1], 32):
        grp = runs[:, g0:g0 + 32]
        amax = np.maximum(np.abs(grp).max(axis=1), 1e-4)
        s = np.exp2(np.ceil(np.log2(amax / top)))
        s = np.where(amax / s > top, 2 * s, s)          # the least power of two with amax / s
        s = np.where(amax / (s / 2) <= top, s / 2, s)   # <= top, whatever log2 rounded to
        assert np.array_equal(s.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64), s)
        out[:, g0:g0 + 32] = (grp / s[:, None]).astype(elem).astype(np.float64) * s[:, None]
    return out.T.reshape(x.shape) if lead else out.reshape(x.shape)


def _held_arrays(specs):
    return [s for s in specs if s.learned and kind(s.datatype) == "real"]


def _random_params(m, env, specs, seed):
    """The interpreter's parameters with every learned real array non-zero random values over
    three binades (fixed arrays and stand-ins as the interpreter builds them)."""
    params = dict(interpreter.interpret(m, env, stand_in=True, seed=seed).params)
    rng = np.random.default_rng(seed)
    for s in _held_arrays(specs):
        shape = params[s.key].shape
        params[s.key] = rng.standard_normal(shape) * np.exp2(rng.integers(-1, 2, shape))
    return params


class _Source:
    """A checkpoint source over in-memory arrays keyed like the interpreter."""

    def __init__(self, params):
        self.params = params

    def get(self, name):
        return torch.from_numpy(np.asarray(self.params[name]))

    def expect(self, names):
        pass


def test_the_blocks_hold_the_arrays_in_question(bundled):
    env = bundled.bind("tiny").env
    specs = [s for t in BLOCKS for s in _held_arrays(param_specs(bundled.block(t), env))]
    multi_bias = [s.key for s in specs if s.role == "bias" and len(s.shape) > 1]
    other = [s.key for s in specs if s.role != "weight" and len(s.shape) > 1]
    wide = [s.key for s in specs if s.role == "weight" and len(s.shape) > 2]
    assert any(k.endswith("Mixing Coefficients/H_{2}.bias") for k in multi_bias)
    assert any(k.endswith("E.table") for k in other)
    assert any(k.endswith("W^{K}_{1}.weight") for k in wide)
    assert any(k.endswith("w_{1}.weight") for k in
               [s.key for s in specs if s.role == "weight" and run_lead(s) == 0
                and len(s.shape) > 1])


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
@pytest.mark.parametrize("title", BLOCKS)
def test_module_and_interpreter_hold_the_same_values(bundled, title, fmt):
    env = bundled.bind("tiny").env
    m = bundled.block(title)
    specs = param_specs(m, env)
    policy = StoragePolicy.parse([fmt])
    params = _random_params(m, env, specs, seed=3)
    ref, report = apply_policy(params, specs, policy)
    assert {k for k, _, _ in report} == {s.key for s in _held_arrays(specs)}
    # the module loaded by its own load_interpreter_params
    g = generate(m, env, weights=policy, runtime={"loader"})
    pymod = load_module(g.source)
    kwargs = {"stand_in": True} if g.root.needs_stand_in else {}
    module = instantiate(pymod, g.class_name, torch.float64, **kwargs)
    pymod.load_interpreter_params(module, params)
    built = type("B", (), {})()
    built.namespace, built.module, built.env = pymod, module, env
    built.specs = {s.key: s for s in specs}
    loaded = interpreter_arrays(built)
    # the module filled by the checkpoint loader, tensor by tensor, on the meta device first
    meta = build_meta(m, env, dtype="float64", weights=policy, stand_in=True)
    materialize(meta, _Source(params), key_map={s.key: s.key for s in _held_arrays(specs)})
    from_checkpoint = interpreter_arrays(meta)
    wrong = []
    for s in _held_arrays(specs):
        want = mx_values(params[s.key], fmt, run_lead(s))
        assert np.count_nonzero(want) > 0.5 * want.size
        for side, got in (("interpreter", ref[s.key]), ("module", loaded[s.key]),
                          ("checkpoint loader", from_checkpoint[s.key])):
            if not np.array_equal(np.asarray(got, dtype=np.float64), want):
                err = np.abs(np.asarray(got, dtype=np.float64) - want).max()
                wrong.append(f"{side}: {s.key} {tuple(want.shape)} off by {err}")
    assert not wrong, "\n".join(wrong)


def _stored_bytes(module) -> int:
    return sum(t.numel() * t.element_size() for w in module.modules() if hasattr(w, "encode_")
               for t in w.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("title", BLOCKS + ["Mixing Coefficients"])
def test_module_bytes_are_the_cost_models(bundled, title):
    env = bundled.bind("tiny").env
    m = bundled.block(title)
    c = cost(m)
    for fmt in ("mxfp8", "mxfp4", "bfloat16", "float32"):
        built = build_meta(m, env, weights=StoragePolicy.parse([fmt]), stand_in=True)
        want = int(env.subs(c.bytes_at(fmt) - c.natural_bytes))
        assert _stored_bytes(built.module) == want, fmt


def test_stored_linear_bias_keeps_its_output_axes(bundled):
    env = bundled.bind("tiny").env
    g = generate(bundled.block("Mixing Coefficients"), env,
                 weights=StoragePolicy.parse(["mxfp4"]))
    flat = " ".join(re.sub(r"\(\s+", "(", g.source).split())
    n, m = "self.config.streams", "self.config.hidden_width"
    assert (f"self.h_2 = StoredLinear({n} * {m}, {n} * {n}, weight_format='mxfp4', "
            f"bias_format='mxfp4', bias_shape=({n}, {n}))") in flat
    module = instantiate(load_module(g.source), g.class_name, torch.float32)
    assert tuple(module.h_2.bias.scales.shape) == (4, 1)   # 4 runs of 4: one scale each
    assert tuple(module.h_0.bias.scales.shape) == (1, 1)


@pytest.mark.parametrize("fmt", ["mxfp8", "mxfp4"])
def test_check_draws_non_zero_biases_and_agrees(bundled, fmt):
    env = bundled.bind("tiny").env
    m = bundled.block("Mixing Coefficients")
    seen = []
    res = check_morphism(m, env, weights=StoragePolicy.parse([fmt]), seeds=2,
                         module_params=lambda p: (seen.append(p), p)[1])
    assert res.ok and res.max_rel <= 1e-12, res.problem
    assert len(seen) == 2
    for params in seen:
        for key, value in params.items():
            if key.endswith(".bias"):  # held in mxfp4, a value may round to 0
                assert np.count_nonzero(value) > value.size // 2, key
    assert not np.array_equal(seen[0][next(k for k in seen[0] if k.endswith("H_{2}.bias"))],
                              seen[1][next(k for k in seen[1] if k.endswith("H_{2}.bias"))])


@pytest.mark.usefixtures("gloo")
def test_hold_rounds_fsdp_sharded_parameters(bundled, tmp_path):
    """``hold`` on a float module whose weights are DTensors (a one-process gloo mesh): the
    whole weight is rounded as the interpreter holds it, not the local shard alone."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from ncdc.checkpoint.module import hold

    env = bundled.bind("tiny").env
    m = bundled.block("Shared Expert")
    built = build_meta(m, env, dtype="float64")
    materialize(built, synthetic=True, seed=4)
    before = interpreter_arrays(built)
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        for lin in (built.module.w_gs, built.module.w_ds):
            lin.weight = torch.nn.Parameter(distribute_tensor(lin.weight.detach(), mesh,
                                                              [Shard(0)]))
        hold(built, StoragePolicy.parse(["mxfp4"]))
        assert isinstance(built.module.w_gs.weight.data, torch.distributed.tensor.DTensor)
        for lin in (built.module.w_gs, built.module.w_ds):
            lin.weight = torch.nn.Parameter(lin.weight.full_tensor())
    finally:
        dist.destroy_process_group()
    after = interpreter_arrays(built)
    for s in param_specs(m, env):
        np.testing.assert_array_equal(after[s.key], mx_values(before[s.key], "mxfp4",
                                                              run_lead(s)))
