"""Code for sizes inside one generated class: a size or constant is the config's field,
``self.config.<name>`` (the base class keeps the config), or, in ``forward``, when the data
fixes it (the token count), a local read off an input's shape."""
from __future__ import annotations

import sympy

from ncdc.ir.errors import SpecError
from ncdc.ir.numeric import FreeNumeric

from .emit import SizePrinter


class SizeCodes:
    """The sizes one class uses, and printers for them (``forward`` and ``__init__``)."""

    def __init__(self, gen):
        self.gen = gen
        self.inputs: list = []  # the class's input wires (set once they are named)
        self.init_symbols: set = set()  # sizes the constructor uses
        self.fwd_symbols: set = set()  # sizes forward reads as self.<name>
        self.data_used: set = set()  # data-fixed sizes forward uses
        self.fwd = SizePrinter(self.fwd_symbol)
        self.init = SizePrinter(self.init_symbol)

    def fwd_symbol(self, sym: FreeNumeric) -> str:
        name = self.gen.sym_name(sym)
        if sym in self.gen.data_symbols:
            self.data_used.add(sym)
            return name
        self.fwd_symbols.add(sym)
        return f"self.config.{name}"

    def init_symbol(self, sym: FreeNumeric) -> str:
        if sym in self.gen.data_symbols:
            raise SpecError(f"the size {sym.label} is fixed by the data (token count) but a "
                            "parameter shape or repetition count depends on it")
        self.init_symbols.add(sym)
        return f"self.config.{self.gen.sym_name(sym)}"

    def axis(self, axis) -> str:
        """Code for an axis length: read off an input that has the axis when the length is
        fixed by the data (``x_m.shape[-2]``), else the size expression (``self.h``)."""
        expr = sympy.sympify(axis.size)
        if any(s in self.gen.data_symbols for s in expr.free_symbols):
            for w in self.inputs:
                for d, a in enumerate(w.array.shape):
                    if a == axis:
                        return f"{w.var}.shape[{d - w.rank}]"
        return self.fwd(axis.size)

    def derivations(self) -> dict:
        """Data-fixed sizes forward reads off its inputs: sym -> code."""
        out = {}
        for sym in sorted(self.data_used, key=lambda s: self.gen.sym_name(s)):
            for w in self.inputs:
                code = self._derive(sym, w)
                if code is not None:
                    out[sym] = code
                    break
        return out

    def _derive(self, sym, w) -> str | None:
        for d, axis in enumerate(w.array.shape):
            expr = sympy.sympify(axis.size)
            if sym not in expr.free_symbols:
                continue
            if any(s in self.gen.data_symbols and s != sym for s in expr.free_symbols):
                continue
            n = sympy.Dummy("n", integer=True, positive=True)
            sol = sympy.solve(sympy.Eq(expr, n), sym)
            if len(sol) != 1:
                continue
            dim = f"{w.var}.shape[{d - w.rank}]"
            printer = SizePrinter(lambda s, dim=dim, n=n: dim if s == n else self.fwd_symbol(s))
            try:
                return printer(sol[0])
            except SpecError:
                continue
        return None
