"""Decoding a sequence a few tokens at a time (pasted into files generated with the ``decoding``
runtime whose block decodes).

``prefill(*inputs)`` runs ``forward`` on the first tokens and ``step(*inputs, state=state)`` on
the next ones; both return ``(outputs, state)``. ``forward`` works on the new tokens only: each
read that reaches back along the token axis (``token_read``, found by ncdc's analysis in
``ir/incremental.py``) reads the last ``keep`` entries the state kept of its source in front of
the new ones, and rotary positions start at the number of tokens already decoded
(``tokens_before``). The state is a dict of tensors of fixed shapes: ``"tokens"`` (that number,
a 0-d int64 tensor) and, per read, ``"<module path>.<read>"`` (always exactly ``keep`` entries
along the token dim). Entries before the first token of the sequence are dead, as reads before
it are in ``forward`` on the whole sequence: they hold 0 and the counter marks them (the entry
``keep - j`` places back from the new tokens is dead while ``tokens < j``), so every shape, and
a compiled ``step``'s graph, is the same at every step.
"""

import torch

from .views import affine_read

_DECODING = None  # the prefill or step call in progress (its state and kept entries), else None


_NAMES = {}
"""The module paths last found per root (``id`` of the root: ``{id(submodule): path}``), of at
most 8 roots; a path is used only once the root's submodule at it is checked to be the module."""


def _module_path(root, module):
    """The path of ``module`` in ``root`` (``"?"`` if not in it), found by ``named_modules`` once
    per root and checked against the module tree on every use (a path whose submodule is not the
    module, after a submodule was replaced, is found again)."""
    names = _NAMES.get(id(root))
    path = None if names is None else names.get(id(module))
    if path is not None and _at(root, path) is module:
        return path
    if len(_NAMES) >= 8:
        _NAMES.clear()
    names = _NAMES[id(root)] = {id(m): name for name, m in root.named_modules()}
    return names.get(id(module), "?")


def _at(root, path):
    """The submodule of ``root`` at ``path`` (None where there is none)."""
    for part in path.split(".") if path else ():
        root = root._modules.get(part)
        if root is None:
            return None
    return root


def _site_key(d, module, site):
    """``<module path>.<site>``, with ``~k`` on the k-th call of one module in a call."""
    base = ".".join(p for p in (_module_path(d["root"], module), site) if p)
    n = d["calls"].get(base, 0)
    d["calls"][base] = n + 1
    return base if n == 0 else f"{base}~{n}"


def tokens_before():
    """How many tokens of the sequence came before this call: 0 outside prefill and step, else
    the state's counter (a 0-d tensor, so a compiled step is not specialised to it)."""
    return 0 if _DECODING is None else _DECODING["start"]


def token_positions(n, device=None):
    """The positions of this call's ``n`` tokens in float64: ``tokens_before()`` onwards."""
    return torch.arange(n, dtype=torch.float64, device=device) + tokens_before()


def token_read(module, site, keep, source, rows, sizes, dim=None, flip=True):
    """``affine_read(source, rows, sizes, dim, flip)`` where the map's first row (row ``k`` for a
    site named ``"<name>@k"``) reads the token dim at or before its token; while decoding, the
    source is first extended by the ``keep`` entries before the new tokens that the state kept
    (zeros at the start of a sequence), the reads of those before the first token are dead, and
    the last ``keep`` entries are kept for the next call."""
    d = _DECODING
    if d is None:
        return affine_read(source, rows, sizes, dim, flip=flip)
    row = int(site.rpartition("@")[2]) if "@" in site else 0
    axis = dim % source.dim() if dim is not None else source.dim() - len(rows) + row
    key = _site_key(d, module, site)
    kept = d["state"].get(key)
    if kept is None:  # a new sequence: dead entries in front
        kept = source.new_zeros(*source.shape[:axis], keep, *source.shape[axis + 1:])
    strides, shift = rows[row]
    rows = [*rows[:row], (strides, shift + keep), *rows[row + 1:]]
    source = torch.cat([kept.to(source.dtype), source], axis)
    n = source.shape[axis]
    d["kept"][key] = source.narrow(axis, n - keep, keep)  # copied by decode
    values, live = affine_read(source, rows, sizes, dim, flip=flip)
    if _past_the_kept(d["start"], keep):
        return values, live  # every kept entry is a token of the sequence
    # the token index each read lands on, laid out as the read's ``live``: dead before token 0
    extent = [n] if dim is not None else list(source.shape[source.dim() - len(rows):])
    at = torch.arange(n, device=source.device).view(
        [n if i == (0 if dim is not None else row) else 1 for i in range(len(extent))])
    index, _ = affine_read(at.expand(extent), rows, sizes, flip=flip)
    return values, live & (index + (d["start"] - keep) >= 0)


def _past_the_kept(start, keep):
    """Whether at least ``keep`` tokens came before (no kept entry is dead), where that is free
    to know: an eager call with the counter on the CPU. Elsewhere (traced, so one graph serves
    every step; or on an accelerator, where reading the counter would wait for it) False, and the
    dead entries are found by the general rule."""
    return (start.device.type == "cpu" and not torch.compiler.is_compiling()
            and not torch.compiler.is_exporting() and int(start) >= keep)


def _copied(x):
    """``x`` with every tensor in it (nested in tuples and lists) copied."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    return type(x)(map(_copied, x)) if isinstance(x, (tuple, list)) else x


def decode(module, state, inputs, kwargs, tokens):
    """``module(*inputs, **kwargs)`` continuing the sequence of ``state`` (None: a new one);
    ``tokens`` = (input index, dim) of the token axis. Returns ``(outputs, state)``.

    An eager call without gradients runs ``module`` in ``torch.inference_mode`` (each op
    dispatches past autograd: a CPU decode step about 10% faster) and returns copies made
    outside it, so outputs and state are ordinary tensors either way."""
    global _DECODING
    if _DECODING is not None:
        raise RuntimeError("prefill and step do not nest")
    k, dim = tokens
    state = dict(state or {})
    start = state.get("tokens")
    start = (torch.zeros((), dtype=torch.int64, device=inputs[k].device) if start is None
             else torch.as_tensor(start, dtype=torch.int64))
    d = {"root": module, "state": state, "start": start, "calls": {}, "kept": {}}
    inference = not (torch.is_grad_enabled() or torch.compiler.is_compiling()
                     or torch.compiler.is_exporting())
    _DECODING = d
    try:
        if inference:
            with torch.inference_mode():
                outputs = module(*inputs, **kwargs)
            outputs = _copied(outputs)
        else:
            outputs = module(*inputs, **kwargs)
    finally:
        _DECODING = None
    kept = {key: v.clone() for key, v in d["kept"].items()}
    return outputs, {"tokens": start + inputs[k].shape[dim], **kept}
