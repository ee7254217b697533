"""The members of one generated class: parameters, buffers, tables and submodules, with one
namespace for their attribute names.

``__init__`` allocates (``torch.empty``) and then calls the class's ``reset_parameters()``
(the ``nn.Linear`` convention), which sets every value; so a module can be built on the meta
device: after ``to_empty(device=...)`` the root's ``init_weights()`` (the generated base class)
runs every submodule's ``reset_parameters()`` children first, eager construction's order.
"""
from __future__ import annotations

from collections.abc import Callable

from ncdc.ir.morphisms import Broadcasted
from ncdc.ir.weight_formats import weight_lead

from .classinfo import Param, Sub
from .names import Namer, string_literal
from .statements import ASSIGN, EXPR, Statement


def zeros(p: str) -> str:
    return f"nn.init.zeros_({p})"


def ones(p: str) -> str:
    return f"nn.init.ones_({p})"


def normal(p: str) -> str:
    return f"nn.init.normal_({p})"


def empty(shape: list[str], dtype: str | None = None) -> str:
    """Code allocating an uninitialised tensor of ``shape`` (size codes)."""
    dims = ", ".join(shape) if shape else "()"
    return f"torch.empty({dims}{', dtype=' + dtype if dtype else ''})"


class Members:
    """Attributes of a class in the order they are made (IR pre-order)."""

    def __init__(self, taken=(), formats=None):
        self.attrs = Namer(taken)
        self.formats = formats or (lambda site, role: None)  # (site, role) -> storage format
        self.stored: dict[str, str] = {}  # code reading a stored weight -> its StoredWeight
        self.init: list[Statement] = []  # __init__ statements after the sizes
        self.reset: list[Statement] = []  # reset_parameters statements
        self.items: list = []  # Param and Sub, in order
        self._unit: str | None = None
        self.token_sites: set[str] = set()  # keys of token_read's caches (codegen/decoder.py)
        self.linears: set[str] = set()  # the plain Linear submodules (self.name; none stored)

    def unit(self) -> str:
        """A float scalar 1 buffer (follows the module's dtype and device), made once."""
        if self._unit is None:
            self._unit = self.add_table("one", [], "torch.ones(())")
        return self._unit

    def add_param(self, base: str, site: Broadcasted, role: str, shape: list[str], init: str | Callable,
                  learned: bool = True, dtype: str | None = None,
                  layout: tuple[int, int] | None = None) -> str:
        """A parameter (``learned``) or persistent buffer of ``shape``; ``init`` is the
        ``reset_parameters`` statement setting it: a string, or ``init(attribute code)``.
        ``layout``: a Linear weight stored as ``[out, in]`` (see :meth:`add_linear`)."""
        attr = self.attrs.fresh(base)
        p = f"self.{attr}"
        fmt = self.formats(site, role) if learned else None
        if fmt is not None:  # held in a storage format, dequantized where it is read
            dims = "(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"
            lead = 0 if layout else weight_lead(site, role)  # [out, in]: runs along in
            self.init.append(Statement(ASSIGN, f"StoredWeight({dims}, {fmt!r}, lead={lead})",
                                       (p,)))
            self.reset.append(Statement(EXPR, init(p) if callable(init) else init))
            self.items.append(Param(attr, site, role, layout, format=fmt))
            self.stored[f"{p}.dequantize()"] = p
            return f"{p}.dequantize()"
        if learned:
            self.init.append(Statement(ASSIGN, f"nn.Parameter({empty(shape, dtype)})", (p,)))
        else:
            self.init.append(Statement(EXPR, f"self.register_buffer({string_literal(attr)}, "
                                       f"{empty(shape, dtype)})"))
        self.reset.append(Statement(EXPR, init(p) if callable(init) else init))
        self.items.append(Param(attr, site, role, layout))
        return p

    def add_linear(self, base: str, site: Broadcasted, in_features: str, out_features: str,
                   bias: bool, n_in: int, out_shape: list[str]) -> str:
        """An ``nn.Linear`` (the prelude's, with the spec's initialisation) whose weight is the
        interpreter's ``[in..., out...]`` flattened to ``[out, in]`` (and its bias to
        ``[out]``): the layout ``F.linear`` consumes, so no call copies it. A bias held in a
        storage format keeps the interpreter's ``[out...]`` (``out_shape``: size codes), whose
        scale groups run along the last output dim as the interpreter's do."""
        attr = self.attrs.fresh(base)
        n_out = len(out_shape)
        w_fmt = self.formats(site, "weight")
        b_fmt = self.formats(site, "bias") if bias else None
        stored = "".join(f", {k}_format={f!r}" for k, f in (("weight", w_fmt), ("bias", b_fmt))
                         if f is not None)
        if b_fmt is not None and n_out > 1:
            stored += f", bias_shape=({', '.join(out_shape)})"
        self.init.append(Statement(ASSIGN, f"{'StoredLinear' if stored else 'Linear'}"
                                   f"({in_features}, {out_features}"
                                   f"{'' if bias else ', bias=False'}{stored})", (f"self.{attr}",)))
        if not stored:
            self.linears.add(f"self.{attr}")
        self.items.append(Param(f"{attr}.weight", site, "weight", (n_in, n_out), w_fmt))
        if bias:
            self.items.append(Param(f"{attr}.bias", site, "bias",
                                    None if b_fmt is not None else (0, n_out), b_fmt))
        return f"self.{attr}"

    def add_module(self, base: str, site: Broadcasted, role: str, make: str,
                   param: str = "weight") -> str | None:
        """A standard submodule ``make`` (code: ``nn.Embedding(...)``, ``nn.RMSNorm(...)``)
        holding the operator's ``role`` array as its ``param``; None where that array is held
        in a storage format (the caller then makes a parameter)."""
        if self.formats(site, role) is not None:
            return None
        attr = self.attrs.fresh(base)
        self.init.append(Statement(ASSIGN, make, (f"self.{attr}",)))
        self.items.append(Param(f"{attr}.{param}", site, role))
        return f"self.{attr}"

    def add_table(self, base: str, shape: list[str], value: str) -> str:
        """A non-persistent buffer of ``shape`` computed by ``reset_parameters`` from ``value``
        (code)."""
        attr = self.attrs.fresh(base)
        p = f"self.{attr}"
        self.init.append(Statement(EXPR, f"self.register_buffer({string_literal(attr)}, "
                                   f"{empty(shape)}, persistent=False)"))
        self.reset.append(Statement(EXPR, f"{p}.copy_({value})"))
        return p

    def add_sub(self, base: str, info, make: str, repeat: int | None = None,
                count: str | None = None) -> str:
        """A submodule ``make`` (code constructing it), or a ModuleList of ``count`` of them."""
        attr = self.attrs.fresh(base)
        if repeat is None:
            self.init.append(Statement(ASSIGN, make, (f"self.{attr}",)))
        else:
            self.init.append(Statement(ASSIGN, f"nn.ModuleList([{make} for _ in range({count})])",
                                       (f"self.{attr}",)))
        self.items.append(Sub(attr, info, repeat, make))
        return attr
