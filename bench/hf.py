"""ncdc's generated layer 0 side by side with Hugging Face's DeepSeek-V4 decoder layer.

The peer is ``transformers``' ``DeepseekV4DecoderLayer`` (``layer_types=["sliding_attention"]``,
``mlp_layer_types=["moe"]``, eager attention, the only one V4 ships); ncdc's is the module
generated for the spec's ``Sliding Window Layer`` (default constructor: sparse experts in eager,
the static pairs form while tracing). Both hold random weights of their own (seeded): the figures
are timings, and the two layers do not compute the same numbers (they also differ where the V4.1
diagram differs from V4). HF's per-model work (the rotary tables and the sliding-window mask,
built once for all layers by ``DeepseekV4Model``) is done outside its timed call; ncdc's layer
computes its own.

Sizes (CPU): hidden 512, hc_mult 4, 8 heads of 128, q_lora_rank 256, o_groups 4, o_lora_rank
128, window 128, 32 experts top-4 of width 256, 1 shared expert, a rotary quarter of each head.
Rows: eager forward float32 / bfloat16 at 256 and 1,024 tokens; a decode step at context 1,024
(HF's layer with its sliding-window cache against ncdc's ``step``) float32 / bfloat16;
``torch.compile`` float32 at 256 and 1,024 tokens; graphs and breaks under
``torch._dynamo.explain``; peak memory of an eager float32 forward at 1,024 tokens (the
profiler's allocation events, ``tests/profiling.py``). Compared calls are interleaved (one call
of each in turn after a warm-up); each row prints min / median of both and ncdc / HF (below 1:
ncdc is faster).

    python bench/hf.py [--quick] [--threads 1|0] [--clock wall|cpu] [--device cpu|cuda]
                       [--rows eager,decode,compile,breaks,memory]

``--threads 0`` keeps torch's default thread count; ``--clock cpu`` times this thread's CPU time
(one thread), which other jobs on a shared machine perturb far less than wall time. ``--quick``
(under 2 minutes on a 2-core machine) runs 256 tokens, 3 rounds, and leaves out the compiled
row (each compilation takes 35 s or more there); the full run takes about 5 minutes on a quiet
2-core machine. HF's cache advances by one token per timed step (its cost does not depend on
the context past the window); ncdc's ``step`` starts from the same state every time.
``--device cuda`` runs bfloat16 at the released layer-0 sizes (hidden 4096, 64 heads of 512,
q_lora_rank 1024, 8 groups of rank 1024, 256 experts top-6 of width 2048; 13 GB of weights
each): eager forwards at 1,024 and 4,096 tokens, compiled at 4,096, and a decode step at
context 4,096 with its tokens per second (written to fit a 10-minute window).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
# this folder holds a codegen.py: keep it off the import path
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]

import torch  # noqa: E402

import ncdc  # noqa: E402
from ncdc import codegen  # noqa: E402

BLOCK = "Sliding Window Layer"
CPU_SIZES = {"m": 512, "n": 4, "h": 8, "c": 128, "q": 256, "g": 4, "j": 2, "o": 128, "w": 128,
             "e": 32, "k": 4, "f": 256, "t": 16}
"""ncdc's size names (``ncdc compile --help``) at the CPU sizes; ``t`` rotary pairs per head."""
HF_NAMES = {"m": "hidden_size", "n": "hc_mult", "h": "num_attention_heads", "c": "head_dim",
            "q": "q_lora_rank", "g": "o_groups", "o": "o_lora_rank", "w": "sliding_window",
            "e": "n_routed_experts", "k": "num_experts_per_tok", "f": "moe_intermediate_size"}
ROWS = ("eager", "decode", "compile", "breaks", "memory")
EXTRA_ROWS = ("profile",)
"""Rows run only when ``--rows`` names them: ``profile``, the mixture's submodules of both
layers timed in one run (forward hooks, the chosen clock)."""


def ms(ts) -> str:
    return f"{min(ts) * 1e3:9.2f} / {statistics.median(ts) * 1e3:9.2f} ms"


def ratio(a, b) -> str:
    return f"{min(a) / min(b):5.2f} / {statistics.median(a) / statistics.median(b):5.2f}"


CLOCK = time.perf_counter
"""The clock of every timing: wall time, or (``--clock cpu``) this thread's CPU time, which a
machine shared with other jobs perturbs far less (one torch thread only)."""


def race(fns: dict, repeat: int, sync=lambda: None) -> dict:
    """Seconds per call of each function: one warm-up call each, then ``repeat`` rounds that
    call every function once, in turn."""
    for fn in fns.values():
        fn()
    sync()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = CLOCK()
            fn()
            sync()
            times[name].append(CLOCK() - t0)
    return times


def _load(path):
    import importlib.util

    full = os.path.normpath(os.path.join(HERE, path))
    spec = importlib.util.spec_from_file_location(os.path.basename(full)[:-3], full)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Ncdc:
    """ncdc's generated layer 0 at ``sizes`` (``preset`` for the rest)."""

    def __init__(self, preset: str, sizes: dict, dtype, device):
        spec = ncdc.load()
        env = spec.bind(preset, sizes=sizes).env
        g = codegen.generate(spec.block(BLOCK), env, runtime={"decoding"})
        mod = codegen.load_module(g.source)
        torch.manual_seed(0)
        with torch.device(device):
            self.module = codegen.instantiate(mod, g.class_name, dtype).eval()
        self.dtype, self.device = dtype, device
        self.hidden, self.streams = int(env.subs(_symbol(spec, "m"))), int(env.subs(_symbol(spec, "n")))

    def inputs(self, tokens: int, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        pre = torch.rand(tokens, self.streams, generator=gen) + 0.5
        x = torch.randn(tokens, self.streams, self.hidden, generator=gen)
        return [pre.to(self.device, self.dtype), x.to(self.device, self.dtype)]


def _symbol(spec, label):
    return next(s for s in spec.symbols.values() if s.label == label)


class HF:
    """HF's decoder layer with the same sizes, its rotary embedding and sliding-window mask."""

    def __init__(self, sizes: dict, dtype, device):
        from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf
        from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

        kw = {HF_NAMES[k]: v for k, v in sizes.items() if k in HF_NAMES}
        self.config = DeepseekV4Config(
            **kw, num_hidden_layers=1, layer_types=["sliding_attention"],
            mlp_layer_types=["moe"], n_shared_experts=1, vocab_size=256,
            partial_rotary_factor=2 * sizes["t"] / sizes["c"])
        self.config._attn_implementation = "eager"
        torch.manual_seed(0)
        with torch.device(device):
            model = hf.DeepseekV4Model(self.config).to(dtype).eval()
        self.layer, self.rotary = model.layers[0], model.rotary_emb
        self.hf, self.dtype, self.device = hf, dtype, device

    def inputs(self, tokens: int, seed: int = 0, start: int = 0, cache=None):
        """``(hidden_states, kwargs)`` for ``tokens`` tokens from position ``start``."""
        from transformers.masking_utils import create_sliding_window_causal_mask

        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(1, tokens, self.config.hc_mult, self.config.hidden_size, generator=gen)
        x = x.to(self.device, self.dtype)
        pos = torch.arange(start, start + tokens, device=self.device)[None]
        embeds = x[:, :, 0]
        rope = {kind: self.rotary(embeds, position_ids=pos, layer_type=kind)
                for kind in ("main", "compress")}
        mask = create_sliding_window_causal_mask(
            config=self.config, inputs_embeds=embeds, attention_mask=None,
            past_key_values=cache, position_ids=pos)
        return x, {"position_embeddings": rope, "position_ids": pos, "attention_mask": mask,
                   "past_key_values": cache}


def _sync(device):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def row(name, times, a="hf", b="ncdc"):
    print(f"{name:<44} HF {ms(times[a])}   ncdc {ms(times[b])}   ncdc/HF {ratio(times[b], times[a])}",
          flush=True)


def eager_rows(sizes, preset, dtypes, tokens, repeat, device):
    for dtype in dtypes:
        hf, nc = HF(sizes, dtype, device), Ncdc(preset, sizes, dtype, device)
        for n in tokens:
            x, kw = hf.inputs(n)
            args = nc.inputs(n)
            with torch.no_grad():
                times = race({"hf": partial(hf.layer, x, **kw), "ncdc": partial(nc.module, *args)},
                             repeat, _sync(device))
            row(f"eager forward, {str(dtype)[6:]}, {n} tokens", times)


def decode_rows(sizes, preset, dtypes, context, repeat, device):
    from transformers.cache_utils import DynamicCache

    for dtype in dtypes:
        hf, nc = HF(sizes, dtype, device), Ncdc(preset, sizes, dtype, device)
        cache = DynamicCache(config=hf.config)
        with torch.no_grad():
            x, kw = hf.inputs(context, cache=cache)
            hf.layer(x, **kw)
            _, state = nc.module.prefill(*nc.inputs(context))
            new = [a[-1:] for a in nc.inputs(context + 1)]
            xs, kws = hf.inputs(1, seed=1, start=context, cache=cache)
            kws["attention_mask"] = None  # one query sees the whole cached window
            times = race({"hf": partial(hf.layer, xs, **kws),
                          "ncdc": partial(nc.module.step, *new, state=state)},
                         repeat, _sync(device))
        row(f"decode step, {str(dtype)[6:]}, context {context}", times)
        if device == "cuda":
            print(f"  tokens/s (one sequence, one layer): HF {1 / min(times['hf']):.0f}, "
                  f"ncdc {1 / min(times['ncdc']):.0f}")


def compile_rows(sizes, preset, dtype, tokens, repeat, device):
    torch._dynamo.config.cache_size_limit = 64
    hf, nc = HF(sizes, dtype, device), Ncdc(preset, sizes, dtype, device)
    for n in tokens:
        torch._dynamo.reset()
        x, kw = hf.inputs(n)
        args = nc.inputs(n)
        hfc = torch.compile(hf.layer, dynamic=False)
        ncc = torch.compile(nc.module, dynamic=False)
        with torch.no_grad():
            t0 = time.perf_counter()
            hfc(x, **kw)
            t1 = time.perf_counter()
            ncc(*args)
            t2 = time.perf_counter()
            times = race({"hf": partial(hfc, x, **kw), "ncdc": partial(ncc, *args)}, repeat,
                         _sync(device))
        row(f"torch.compile, {str(dtype)[6:]}, {n} tokens", times)
        print(f"  compile time: HF {t1 - t0:.1f} s, ncdc {t2 - t1:.1f} s")


def breaks_row(sizes, preset, device):
    hf, nc = HF(sizes, torch.float32, device), Ncdc(preset, sizes, torch.float32, device)
    x, kw = hf.inputs(64)
    with torch.no_grad():
        a = torch._dynamo.explain(hf.layer)(x, **kw)
        b = torch._dynamo.explain(nc.module)(*nc.inputs(64))
    print(f"{'graphs / breaks under dynamo (default module)':<44} HF {a.graph_count} / "
          f"{a.graph_break_count}   ncdc {b.graph_count} / {b.graph_break_count}")
    for r in b.break_reasons[:6]:
        print(f"  ncdc break: {r.reason.splitlines()[0][:100]}")


def memory_row(sizes, preset, tokens, device):
    peak = _load("../tests/profiling.py").peak_forward_bytes
    hf, nc = HF(sizes, torch.float32, device), Ncdc(preset, sizes, torch.float32, device)
    x, kw = hf.inputs(tokens)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = hf.layer

        def forward(self, x):
            return self.layer(x, **kw)

    a, b = peak(Wrapped(), [x]), peak(nc.module, nc.inputs(tokens))
    print(f"{f'peak memory, eager float32, {tokens} tokens':<44} HF {a / 2**20:9.1f} MiB"
          f"{'':12}ncdc {b / 2**20:9.1f} MiB{'':12}ncdc/HF {b / a:5.2f}")


def profile_rows(sizes, preset, dtypes, tokens, repeat, device):
    """Each side's mixture and its parts (router, routed experts, shared expert; the rest is the
    pair bookkeeping), timed by forward hooks on the chosen clock over interleaved eager calls:
    the MoE profile of docs/performance.md."""
    parts = {"hf": ("mlp", "mlp.gate", "mlp.experts", "mlp.shared_experts"),
             "ncdc": ("single_pass_mhc_moe.body",
                      *(f"single_pass_mhc_moe.body.{n}"
                        for n in ("expert_gate", "routed_experts", "shared_expert")))}
    for dtype in dtypes:
        hf, nc = HF(sizes, dtype, device), Ncdc(preset, sizes, dtype, device)
        times = {}
        for side, root in (("hf", hf.layer), ("ncdc", nc.module)):
            for name in parts[side]:
                module, key = root.get_submodule(name), (side, name)
                times[key] = []
                module.register_forward_pre_hook(
                    lambda m, a, t=times[key]: t.append(CLOCK()))
                module.register_forward_hook(
                    lambda m, a, o, t=times[key]: t.append(CLOCK() - t.pop()))
        x, kw = hf.inputs(tokens)
        args = nc.inputs(tokens)
        with torch.no_grad():
            race({"hf": partial(hf.layer, x, **kw), "ncdc": partial(nc.module, *args)}, repeat,
                 _sync(device))
        for label, i in (("mixture", 0), ("router", 1), ("routed experts", 2), ("shared", 3)):
            a, b = times["hf", parts["hf"][i]], times["ncdc", parts["ncdc"][i]]
            row(f"profile, {str(dtype)[6:]}, {tokens} tokens: {label}", {"hf": a, "ncdc": b})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds, 256 tokens only, no compiled row")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this thread's CPU time (with --threads 1 only)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--rows", default=",".join(ROWS),
                    help=f"any of {', '.join(ROWS + EXTRA_ROWS)} (default: {', '.join(ROWS)})")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        if torch.get_num_threads() != 1 or args.device != "cpu":
            ap.error("--clock cpu times one CPU thread: use it with --threads 1 on the CPU")
        global CLOCK
        CLOCK = time.thread_time
    rows = set(args.rows.split(","))
    if args.quick:
        rows.discard("compile")
    cuda = args.device == "cuda"
    if cuda:
        preset, sizes, dtypes = "released", RELEASED_SIZES, (torch.bfloat16,)
        tokens, context, repeat = (1024, 4096), 4096, args.repeat or 10
    else:
        preset, sizes, dtypes = "medium", CPU_SIZES, (torch.float32, torch.bfloat16)
        tokens = (256,) if args.quick else (256, 1024)
        context, repeat = 1024, args.repeat or (3 if args.quick else 7)
    print(f"{BLOCK}: ncdc (generated) vs transformers DeepseekV4DecoderLayer, {args.device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}; {args.clock} clock, "
          f"min / median over {repeat} interleaved rounds; random weights (timing only)",
          flush=True)
    if "eager" in rows:
        eager_rows(sizes, preset, dtypes, tokens, repeat, args.device)
    if "decode" in rows:
        decode_rows(sizes, preset, dtypes, context, 5 * repeat, args.device)
    if "compile" in rows:
        compile_rows(sizes, preset, dtypes[0] if cuda else torch.float32,
                     tokens[-1:] if cuda else tokens, repeat, args.device)
    if "breaks" in rows:
        breaks_row(sizes, preset, args.device)
    if "memory" in rows and not cuda:
        memory_row(sizes, preset, tokens[-1], args.device)
    if "profile" in rows:
        profile_rows(sizes, preset, dtypes, tokens[0], 3 * repeat, args.device)
    return 0


RELEASED_SIZES = {"m": 4096, "n": 4, "h": 64, "c": 512, "q": 1024, "g": 8, "j": 8, "o": 1024,
                  "w": 128, "e": 256, "k": 6, "f": 2048, "t": 32}
"""The released layer 0 (``released`` preset; HF's ``DeepseekV4Config`` defaults)."""

if __name__ == "__main__":
    sys.exit(main())
