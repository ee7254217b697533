"""Benchmark: layer 0 ("Sliding Window Layer") at released sizes on a few tokens, its weights in
storage formats (routed experts MXFP4 or MXFP8, every other weight bfloat16), next to the cost
model's prediction.

Phases, each timed, with the peak RSS after it (``resource.getrusage`` maxrss): generate the
module with the storage policy (``ncdc compile --weights``), build it on the meta device,
``to_empty``, ``reset_parameters`` on every module (stored weights drawn and encoded in chunks),
a bfloat16 forward. Beside them: the weight bytes the cost model gives under the same policy
(``ncdc cost --weights``) and the memory preflight's estimate.

Correctness at the same sizes (``--check``): the first Single-Pass mHC (attention half) whole,
and the Mixture of Experts token by token through the experts each token selects, each rerun in
float64 on the inputs the bfloat16 forward gave it and compared with the interpreter on the same
weights (the stored values decoded; of the routed experts only the selected ones).

    python bench/released.py --experts mxfp4            # released sizes (~8 GB)
    python bench/released.py --preset medium --check    # the same at small sizes
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ncdc
from ncdc import codegen, interpreter
from ncdc.interpreter.storage_policy import StoragePolicy
from ncdc.ir.params import param_specs
from ncdc.preflight import estimate, human

LAYER = "Sliding Window Layer"
ATTENTION = f"{LAYER}/Single-Pass mHC"
MOE = f"{LAYER}/Single-Pass mHC~1/Mixture of Experts"


def peak_rss() -> int:
    """Peak resident set of this process so far, bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Phases:
    def __init__(self):
        self.rows = []

    def run(self, name, fn, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.rows.append((name, time.perf_counter() - t0, peak_rss()))
        print(f"  {name:<28} {self.rows[-1][1]:8.2f} s   peak RSS {human(self.rows[-1][2])}",
              flush=True)
        return out


def policy_items(experts: str) -> list[str]:
    return [f"*/Routed Experts/*={experts}", "bfloat16"]


def prediction(layer, env, policy) -> tuple[int, int]:
    """(weight bytes under the policy, the preflight's peak estimate) from the cost model."""
    from ncdc.ir.cost import cost

    c = cost(layer)
    def fmt(p):
        return policy.format_for(p.name)

    weights = sum(int(env.subs(p.bytes_at(fmt(p) or "float32"))) for p in c.params if p.learned)
    est = estimate(layer, env, c=c, held=fmt)
    return weights, est.total if est is not None else -1


def build(mod, g, kwargs):
    with torch.device("meta"):
        return getattr(mod, g.class_name)(**kwargs)


def reset_all(model):
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()


def decoded(model, g, names) -> dict:
    """Interpreter-keyed float64 values of the module's weights ``names`` (state_dict names)."""
    out = {}
    for name in names:
        try:
            w = model.get_submodule(name)
            value = w.dequantize().double() if hasattr(w, "dequantize") else None
        except AttributeError:
            value = None
        if value is None:
            value = model.get_parameter(name).detach().double()
        key = g.param_keys[name]
        layout = sys.modules[type(model).__module__].PARAM_LAYOUT.get(name)
        if layout is not None:  # nn.Linear [out, in] -> [in..., out...] (bias [out...])
            value = (value.T if layout[0] else value).reshape(_SHAPES[key])
        out[key] = value.numpy()
    return out


_SHAPES: dict = {}


def record_inputs(module):
    """Forward pre-hook recording a module's arguments (the last call's)."""
    seen = {}

    def hook(mod, args, kwargs):
        seen["args"], seen["kwargs"] = args, kwargs

    module.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


def as64(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def relative(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(a - b))) / scale


def check_attention(spec, env, model, g, seen) -> float:
    site = spec.site(ATTENTION)
    block = site.node
    sub = model.single_pass_mhc
    prefix = LAYER + "/"
    names = [n for n, k in g.param_keys.items() if k.startswith(ATTENTION + "/")]
    params = {k[len(prefix):]: v for k, v in decoded(model, g, names).items()}
    sub.to(torch.float64)
    with torch.no_grad():
        got = sub(*[as64(a) for a in seen["args"]],
                  **{k: as64(v) for k, v in seen["kwargs"].items()})
    sub.to(torch.bfloat16)
    got = got if isinstance(got, tuple) else (got,)
    xs = [a.double().numpy() for a in seen["args"]]
    ref = interpreter.interpret(block, env, params=params).evaluate(*xs).outputs
    return max(relative(t.numpy(), r.values) for t, r in zip(got, ref, strict=True))


def check_moe(spec, preset, sizes, model, g, seen, k: int) -> float:
    """Per token: the MoE with its expert axis cut to the ``k`` experts the token selects (the
    top k among all are the top k among themselves; gate weights normalise over them)."""
    block = spec.site(MOE).node
    sub = model.single_pass_mhc_moe.body
    names = [n for n, key in g.param_keys.items() if key.startswith(MOE + "/")]
    prefix = MOE.rsplit("/", 1)[0] + "/"
    env_k = spec.bind(preset, {**sizes, "e": k}).env
    x = seen["args"][0].double()
    sub.to(torch.float64)
    try:
        with torch.no_grad():
            got = sub(x).reshape(-1, x.shape[-1])
            live = sub.expert_gate(x)[1].reshape(-1, sub.expert_gate.w_r.out_features)
        worst = 0.0
        for t, row in enumerate(x.reshape(-1, x.shape[-1])):
            chosen = torch.nonzero(live[t]).flatten().tolist()
            assert len(chosen) == k, chosen
            params = {g.param_keys[n][len(prefix):]: expert_slice(model, g, n, chosen)
                      for n in names}
            ref = interpreter.interpret(block, env_k, params=params).evaluate(
                row.numpy()).outputs[0].values
            worst = max(worst, relative(got[t].numpy(), ref))
    finally:
        sub.to(torch.bfloat16)
    return worst


def expert_slice(model, g, name, chosen):
    """Float64 value of one MoE weight (interpreter layout), its expert axis cut to
    ``chosen``: a stored expert stack decodes only those experts."""
    key = g.param_keys[name]
    labels = _LABELS[key]
    axis = next((i for i, lab in enumerate(labels) if lab in ("e", "k/e")), None)
    try:
        w = model.get_submodule(name)
    except AttributeError:
        w = None
    if axis is not None and w is not None and tuple(w.shape) == _SHAPES[key]:
        with torch.no_grad():
            return torch.stack([w.select(axis, i) for i in chosen], dim=axis).double().numpy()
    value = decoded(model, g, [name])[key]
    return value if axis is None else np.take(value, chosen, axis=axis)


_LABELS: dict = {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experts", choices=("mxfp4", "mxfp8"), default="mxfp4",
                    help="storage format of the routed experts (default: mxfp4)")
    ap.add_argument("--preset", default="released",
                    help="size preset: released, medium or tiny (develop at small sizes)")
    ap.add_argument("--size", action="append", default=[], metavar="NAME=N",
                    help="override a size (repeatable)")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--check", action="store_true",
                    help="check the attention half and the MoE against the interpreter")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = ncdc.load(None)
    from ncdc.commands.cost_report import _solve_tokens, token_axis

    sizes = {}
    for item in args.size:
        k, _, v = item.partition("=")
        sizes[k] = int(v)
    layer = spec.block(LAYER)
    solved = _solve_tokens(token_axis(spec, layer), spec.bind(args.preset, sizes).env,
                           args.tokens, set())
    sizes.update({s.label: v for s, v in solved.items()})
    env = spec.bind(args.preset, sizes).env
    policy = StoragePolicy.parse(policy_items(args.experts))
    for p in param_specs(layer, env):
        _SHAPES[p.key] = tuple(int(env.size(s)) for s in p.shape)
        _LABELS[p.key] = tuple(p.axis_labels)
    weights, peak = prediction(layer, env, policy)
    print(f"{LAYER} at preset {args.preset}, {args.tokens} tokens, routed experts "
          f"{args.experts}, other weights bfloat16; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"  cost model: weights {human(weights)} under the policy; preflight peak "
          f"estimate {human(peak)}")
    ph = Phases()
    g = ph.run("generate", codegen.generate, layer, env, weights=policy, runtime={"loader"})
    mod = codegen.load_module(g.source)
    model = ph.run("build on meta", build, mod, g, {})
    ph.run("to_empty", model.to_empty, device="cpu")
    torch.manual_seed(0)
    ph.run("reset_parameters", reset_all, model)
    model.to(torch.bfloat16)
    stored = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    print(f"  stored state: {human(stored)} (cost model {human(weights)})")
    rng = np.random.default_rng(0)
    xs = [torch.from_numpy(rng.standard_normal(env.sizes(a.shape))).to(torch.bfloat16)
          for a in layer.dom]
    seen_att = record_inputs(model.single_pass_mhc)
    seen_moe = record_inputs(model.single_pass_mhc_moe.body)
    with torch.no_grad():
        out = ph.run("forward (bfloat16)", model, *xs)
    out = out if isinstance(out, tuple) else (out,)
    print(f"  outputs finite: {all(bool(torch.isfinite(o.float()).all()) for o in out)}")
    print(f"  peak RSS {human(peak_rss())} vs stored weights {human(stored)} and the "
          f"preflight's {human(peak)}")
    if args.check:
        k = model.config.k
        att = ph.run("check attention half", check_attention, spec, env, model, g, seen_att)
        print(f"    Single-Pass mHC vs interpreter (float64): max rel {att:.2e}")
        moe = ph.run("check MoE per token", check_moe, spec, args.preset, sizes, model, g,
                     seen_moe, k)
        print(f"    Mixture of Experts vs interpreter, selected experts only: max rel {moe:.2e}")
        ok = att <= 1e-9 and moe <= 1e-9
        print("  check:", "ok" if ok else "MISMATCH")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
