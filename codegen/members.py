"""The members of one generated class: parameters, buffers, tables and submodules, with the
``__init__`` lines that make them and one namespace for their attribute names."""
from __future__ import annotations

from ncdc.ir.morphisms import Broadcasted

from .classinfo import INDENT, Param, Sub
from .names import Namer


class Members:
    """Attributes of a class in the order they are made (IR pre-order)."""

    def __init__(self, taken=()):
        self.attrs = Namer(taken)
        self.init_lines: list[str] = []
        self.items: list = []  # Param and Sub, in order
        self.needs_one = False

    def add_param(self, base: str, site: Broadcasted, role: str, init_code: str,
                  learned: bool) -> str:
        attr = self.attrs.fresh(base)
        if learned:
            self.init_lines.append(INDENT * 2 + f"self.{attr} = nn.Parameter({init_code})")
        else:
            self.init_lines.append(INDENT * 2 + f'self.register_buffer("{attr}", {init_code})')
        self.items.append(Param(attr, site, role))
        return f"self.{attr}"

    def add_table(self, base: str, init_code: str) -> str:
        """A non-persistent buffer computed at construction (not a parameter)."""
        attr = self.attrs.fresh(base)
        self.init_lines.append(INDENT * 2
                               + f'self.register_buffer("{attr}", {init_code}, persistent=False)')
        return f"self.{attr}"

    def add_sub(self, base: str, info, make: str, repeat: int | None = None,
                count: str | None = None) -> str:
        """A submodule ``make`` (code constructing it), or a ModuleList of ``count`` of them."""
        attr = self.attrs.fresh(base)
        if repeat is None:
            self.init_lines.append(INDENT * 2 + f"self.{attr} = {make}")
        else:
            self.init_lines.append(INDENT * 2 + f"self.{attr} = nn.ModuleList("
                                   f"[{make} for _ in range({count})])")
        self.items.append(Sub(attr, info, repeat))
        return attr
