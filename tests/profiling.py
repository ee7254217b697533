"""Peak memory of a forward, measured one way for the tests and `bench/codegen.py`,
`bench/hf.py` (which load this file by path, so it imports nothing of ``tests``)."""
from ncdc.ir.lazy import lazy_module

torch = lazy_module("torch")


def peak_forward_bytes(module, args) -> int:
    """Peak of the running sum of the profiler's allocation events during one forward (inputs
    and weights, allocated before, not counted)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        module(*args)
    events = sorted((e.start_ns(), e.nbytes()) for e in p.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    cur = peak = 0
    for _, n in events:
        cur += n
        peak = max(peak, cur)
    return peak
