"""``ncdc blocks``: every block title and where it has a body."""
from __future__ import annotations

from .common import add_spec_args, emit_json, load_spec


def add_parser(sub) -> None:
    p = sub.add_parser("blocks", help="block titles, occurrences, with or without body",
                       description="Every block title: whether it has a body in the data, how "
                       "many times, and how many tag records of the repository carry it (used "
                       "by a block / unused). Titles whose tags label no block of the data are "
                       "listed after the others as repository-only: for the truncated bundled "
                       "spec they are the blocks of the lost remainder.")
    add_spec_args(p)
    p.add_argument("--paths", action="store_true", help="list the JSON path of every occurrence")
    p.set_defaults(run=run)


def run(args) -> int:
    from ncdc.ir.names import shown_text
    from ncdc.spec.summary import block_titles

    spec = load_spec(args)
    entries = block_titles(spec.doc)
    with_body = [e for e in entries if e.has_body]
    repo_only = [e for e in entries if not e.has_body]
    if args.json:
        emit_json({"source": spec.source, "titles": [e.as_dict() for e in entries],
                   "with_body": len(with_body), "repository_only": len(repo_only)})
        return 0
    width = max([len(shown_text(e.title)) for e in entries] + [5])
    print(f"{'TITLE':<{width}}  {'BODY':<4}  {'OCCURRENCES':>11}  TAGS used/unused")
    for e in with_body + repo_only:
        body = "yes" if e.has_body else "no"
        print(f"{shown_text(e.title):<{width}}  {body:<4}  {len(e.paths):>11}  "
              f"{e.tags_referenced}/{e.tags_unreferenced}")
        if args.paths:
            for p in e.paths:
                print(f"    {p}")
    print(f"{len(entries)} titles: {len(with_body)} with a body in the data, {len(repo_only)} "
          "only in the repository")
    return 0
