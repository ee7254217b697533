"""``ncdc export --hf DIR``: a block (or the whole model) as a Hugging Face model folder."""
from __future__ import annotations

import argparse
import os
import sys

from .common import (
    add_block_arg,
    add_checkpoint_args,
    add_memory_arg,
    add_quant_arg,
    add_reading_arg,
    add_size_args,
    add_spec_args,
    bind_from_args,
    chosen_block,
    emit_json,
    load_spec,
)

DESCRIPTION = """\
Export a block (or the whole model) as a folder that transformers loads with
trust_remote_code=True: config.json, configuration_ncdc.py and modeling_ncdc.py (the generated
module wrapped as PreTrainedConfig / PreTrainedModel), ncdc_module.py (the generated source),
model.safetensors (sharded with an index past --max-shard-size) and a README with the spec's
sha256. A diagram mapping token ids to a distribution or logits over a vocabulary becomes an
AutoModelForCausalLM with generate(); any other an AutoModel (docs/hf-export.md).
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="export as a Hugging Face model folder",
                              description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_args(p)
    p.add_argument("--hf", required=True, metavar="DIR",
                   help="the folder to write (created if missing; files of an earlier export "
                        "there are replaced)")
    add_block_arg(p, default="the whole model; for a truncated spec its complete leading part",
                  dest_help="export this block")
    add_size_args(p, default_preset="tiny")
    p.add_argument("--params", dest="source", default="synthetic", metavar="WEIGHTS",
                   help="the weights: a .npz or .safetensors file keyed as ncdc params lists "
                        "them; with --map, a checkpoint; or synthetic for seeded synthetic "
                        "weights (default: synthetic)")
    add_checkpoint_args(p)
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of synthetic weights (default: 0)")
    p.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32",
                   metavar="DTYPE", help="dtype of the weights: float32, float64 or bfloat16 "
                                         "(default: float32)")
    p.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                   help="largest weights file; past it the weights are sharded with an index "
                        "(e.g. 2GiB, 500MB; default: 5GB)")
    add_quant_arg(p, help="default of the module's quant switch: exact or emulate "
                          "(default: exact)")
    add_reading_arg(p)
    add_memory_arg(p)
    p.set_defaults(run=run)


def _shard_size(text: str) -> int:
    from ncdc.ir.errors import EvaluationError, UsageError
    from ncdc.preflight import parse_size

    try:
        return parse_size(text)
    except EvaluationError:
        raise UsageError(f"--max-shard-size {text!r}: expected a size such as 2GiB, 500MB or "
                         "1000000 (bytes)") from None


def _preflight(morphism, env, args) -> None:
    """Refuse before allocating when the module at ``--dtype`` (and the cost model's largest
    activations) would exceed ``--max-memory`` or the machine's available memory
    (``NCDC_NO_PREFLIGHT=1`` lifts the latter)."""
    from ncdc.preflight import check_budget, estimate, parse_size

    est = estimate(morphism, env, held=None if args.dtype == "float64" else args.dtype)
    avail = (2**63, "NCDC_NO_PREFLIGHT=1") if os.environ.get("NCDC_NO_PREFLIGHT") == "1" \
        else None
    limit = parse_size(args.max_memory) if args.max_memory else None
    check_budget(est, command="export", max_memory=limit, available=avail)


def run(args) -> int:
    from ncdc.hf.export import export_hf
    from ncdc.ir.errors import UsageError
    from ncdc.rank import RankPlan

    from .run import _check_source_path

    limit = _shard_size(args.max_shard_size)
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: a seed is a whole number from 0")
    spec = load_spec(args)
    _check_source_path(args)
    binding = bind_from_args(spec, args, default_preset="tiny")
    morphism, where = chosen_block(spec, args)
    _preflight(morphism, binding.env, args)

    def model_specs():
        from ncdc.ir.params import param_specs

        return param_specs(spec.model(), binding.env)

    plan = RankPlan(morphism, binding.env, args.source, map=args.map,
                    key_prefix=args.key_prefix, dtype=args.dtype, quant=args.quant,
                    reading=args.reading, seed=args.seed,
                    model_specs=model_specs if args.block else None)
    title = getattr(getattr(morphism, "tag", None), "title", None) or \
        os.path.splitext(os.path.basename(spec.source))[0]
    out = export_hf(plan, args.hf, spec_path=spec.source, title=title, max_shard_size=limit)
    info = {"folder": out.folder, "block": where, "architecture": out.architecture,
            "kind": out.kind, "incremental": out.incremental, "decoding": out.decoding,
            "probabilities": out.probabilities, "tensors": out.tensors, "bytes": out.bytes,
            "files": out.files, "fields": out.fields}
    if args.json:
        emit_json(info)
        return 0
    how = {"state": "decodes with ncdc's decoder state", "positionwise": "position by position",
           "recompute": "not incremental"}[out.decoding]
    print(f"wrote {out.folder}: {out.architecture} ({out.kind}, {how}), {out.tensors} tensors, "
          f"{out.bytes:,} bytes, files: {', '.join(out.files)}", file=sys.stderr)
    return 0
