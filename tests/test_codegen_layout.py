"""Parameters are stored in the layout their contraction consumes: a forward of layer 0 never
copies, permutes into a copy, or makes contiguous any parameter (watched at the ATen level), and
the stored layout is a fixed reshape/transpose of the interpreter's array (PARAM_LAYOUT)."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter
from ncdc.codegen import generate, instantiate, load_module
from tests.lazy import Deferred, torch, tree_flatten

COPYING = ("aten.copy_", "aten.clone", "aten._to_copy", "aten.contiguous", "aten._reshape_copy",
           "aten.index_select", "aten.cat", "aten.stack")


@Deferred
def ParameterReads():
    from torch.utils._python_dispatch import TorchDispatchMode

    class ParameterReads(TorchDispatchMode):
        """Every ATen call that reads a parameter's storage: (op, parameter name)."""

        def __init__(self, module):
            super().__init__()
            self.names = {p.untyped_storage().data_ptr(): n for n, p in module.named_parameters()}
            self.calls: list[tuple[str, str]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            for a in tree_flatten((args, kwargs or {}))[0]:
                if isinstance(a, torch.Tensor):
                    name = self.names.get(a.untyped_storage().data_ptr())
                    if name is not None:
                        self.calls.append((str(func), name))
            return func(*args, **(kwargs or {}))

    return ParameterReads


def _layer0(bundled, preset="tiny"):
    env = bundled.bind(preset).env
    block = bundled.block("Sliding Window Layer")
    g = generate(block, env, runtime={"loader"})
    mod = load_module(g.source)
    return block, env, g, mod


@pytest.mark.slow
def test_layer0_forward_copies_no_parameter(bundled):
    block, env, g, mod = _layer0(bundled)
    module = instantiate(mod, g.class_name, torch.float32)
    inputs = [torch.from_numpy(np.array(a)).float()
              for a in interpreter.random_inputs(block, env, 0)]
    for batch in ((), (2,)):
        args = [a.expand(*batch, *a.shape) for a in inputs]
        spy = ParameterReads(module)
        with torch.no_grad(), spy:
            module(*args)
        read = {name for _, name in spy.calls}
        assert len(read) == len(spy.names)  # the watch sees every parameter being read
        copies = sorted({(op, name) for op, name in spy.calls if op.startswith(COPYING)})
        # but Linears reading one input, stacked into one product (prelude ``linears``) where
        # their weights are fewer numbers than the input: the mHC's three coefficient maps
        stacked = {c for c in copies if c[0] == "aten.cat.default"
                   and ".mixing_coefficients.h_" in c[1]}
        assert not set(copies) - stacked, copies
    # the grouped output projection contracts two input axes: stored [out, in] and read as a
    # view, with its PARAM_LAYOUT entry
    name = next(n for n in mod.PARAM_KEYS if n.endswith("grouped_output_projection.w_oa"))
    assert mod.PARAM_LAYOUT[name] == (2, 2)
    assert module.state_dict()[name].dim() == 2


def test_the_watch_sees_a_copy(bundled):
    """The watch itself can fail: the interpreter's own [j, c, g, o] layout, einsum'd as such,
    copies the weight on every call."""
    w = torch.nn.Parameter(torch.randn(2, 8, 2, 4))
    holder = torch.nn.Module()
    holder.w = w
    spy = ParameterReads(holder)
    with torch.no_grad(), spy:
        torch.einsum('...gjc,jcgo->...go', torch.randn(3, 2, 2, 8), w)
    assert any(op.startswith(COPYING) for op, _ in spy.calls)


def test_stored_layout_loads_the_interpreter_array(bundled):
    """Loading interpreter weights puts W^{Oa}[j, c, g, o] at w_oa[g * o, j * c] (checked by
    hand-indexing), and the module's product equals the interpreter's einsum."""
    block, env, g, mod = _layer0(bundled)
    module = instantiate(mod, g.class_name, torch.float64)
    run = interpreter.interpret(block, env, stand_in=True)
    g.load_params(module, run.params)
    name = next(n for n in mod.PARAM_KEYS if n.endswith("grouped_output_projection.w_oa"))
    want = np.asarray(run.params[mod.PARAM_KEYS[name]])  # [j, c, g, o]
    got = module.state_dict()[name].numpy()
    j, c, gg, o = want.shape
    for jj, cc, g_, oo in [(0, 0, 0, 0), (j - 1, c - 1, gg - 1, o - 1), (1 % j, 3 % c, 0, 5 % o)]:
        assert got[g_ * o + oo, jj * c + cc] == want[jj, cc, g_, oo]
    proj = module.get_submodule(name.rsplit(".", 1)[0])
    x = torch.randn(3, gg * j, c, dtype=torch.float64)  # [h, c], h = g * j
    with torch.no_grad():
        out = proj(x)
    grp = x.numpy().reshape(3, gg, j, c)
    ref = np.einsum("bgjc,jcgo->bgo", grp, want).reshape(3, gg * o)
    assert out.shape[-1] == module.state_dict()[name.replace("w_oa", "w_ob.weight")].shape[0]
    w_ob = module.state_dict()[name.replace("w_oa", "w_ob.weight")].numpy()
    np.testing.assert_allclose(out.numpy(), ref @ w_ob.T, rtol=1e-12, atol=1e-12)


def _values(dtype) -> np.ndarray:
    """Every finite value of a <= 16-bit ml_dtypes/numpy float type, as float64."""
    bits = np.arange(2 ** (8 * np.dtype(dtype).itemsize), dtype=np.uint64)
    raw = bits.astype(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint8)
    with np.errstate(invalid="ignore"):
        v = raw.view(dtype).astype(np.float64)
    return v[np.isfinite(v)]


def test_format_containment_table_against_ml_dtypes():
    """``widens(narrow, wide)`` holds only where every finite value of ``narrow`` survives a
    round trip through ``wide`` unchanged (exhaustive over the narrow format's codes)."""
    import ml_dtypes

    from ncdc.codegen.formats import CONTAINS, widens

    types = {"FP32": np.float32, "BF16": ml_dtypes.bfloat16, "FP16": np.float16,
             "E4M3": ml_dtypes.float8_e4m3fn, "E5M2": ml_dtypes.float8_e5m2,
             "E2M1": ml_dtypes.float4_e2m1fn}
    for wide in ("FP32", "BF16", "FP16"):
        for narrow in ("BF16", "FP16", "E4M3", "E5M2", "E2M1"):
            v = _values(types[narrow])
            with np.errstate(over="ignore"):
                kept = bool(np.array_equal(v.astype(types[wide]).astype(np.float64), v))
            assert widens(narrow, wide) == kept, (narrow, wide)
        assert widens(wide, wide) and not widens(None, wide)
    assert not widens("E4M3/32", "FP32")  # an MX block scale can leave FP32's range
    assert "UE8M0" in CONTAINS["FP32"] and "UE8M0" not in CONTAINS["FP16"]
    assert float(2.0 ** -127) == float(np.float32(2.0 ** -127))  # UE8M0's least value in FP32
    assert float(2.0 ** -127) == float(ml_dtypes.bfloat16(2.0 ** -127))
