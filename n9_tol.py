import sys

import numpy as np
from ncdc.codegen.check import ModuleCache, check_morphism
from ncdc.codegen.recorded import record_block_inputs

import ncdc
from ncdc import interpreter

spec = ncdc.load(); env = spec.bind("tiny").env
rec = record_block_inputs(interpreter.prefix(spec.data), env)
cache = ModuleCache()
blocks = sys.argv[1].split(",")
for name in blocks:
    site = spec.site(name)
    fed = rec.get(id(site.node))
    kw = {} if fed is None else {"inputs": [v for v,_ in fed], "masks": [m for _,m in fed]}
    keys = [k for k, v in interpreter.interpret(site.node, env, stand_in=True).params.items() if np.asarray(v).dtype.kind == "f" and np.asarray(v).size > 1]
    for dt in ("float32", "bfloat16"):
        ok = check_morphism(site.node, env, dtype=dt, cache=cache, **kw)
        print(f"{name} {dt}: ok={ok.ok} rel={ok.max_rel:.2e} est={ok.error_estimate:.2e} tol={ok.tolerance:.2e} {ok.problem}")
        for key in keys[:3]:
            for size in (0.3, 0.05, 0.01):
                def nudge(params, key=key, size=size):
                    w = np.asarray(params[key], dtype=np.float64)
                    rng = np.random.default_rng(7)
                    params[key] = w + size * w.std() * rng.standard_normal(w.shape)
                    return params
                def one(params, key=key, size=size):
                    w = np.array(params[key], dtype=np.float64)
                    w.flat[0] += size * w.std()
                    params[key] = w
                    return params
                bad = check_morphism(site.node, env, dtype=dt, cache=cache, module_params=nudge, **kw)
                bad1 = check_morphism(site.node, env, dtype=dt, cache=cache, module_params=one, **kw)
                print(f"   {key.split('/')[-1]} all {size}: caught={not bad.ok} rel={bad.max_rel:.2e} | one elem {size}: caught={not bad1.ok} rel={bad1.max_rel:.2e}")
