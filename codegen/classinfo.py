"""What is known of a generated class once written, and of its members."""
from __future__ import annotations

from dataclasses import dataclass, field

from ncdc.ir.arrays import Array
from ncdc.ir.morphisms import Broadcasted

from . import liveness
from .names import comment_text

INDENT = "    "


@dataclass
class Param:
    """A parameter or buffer attribute of a class, in IR pre-order."""

    attr: str
    site: Broadcasted
    role: str
    layout: tuple | None = None  # (input dims, output dims) of an nn.Linear weight or bias
    format: str | None = None  # storage format (a StoredWeight, codegen/storage.py), else None


@dataclass
class Sub:
    """A submodule attribute: one instance, or a ModuleList of ``repeat`` instances, built by
    ``make`` (code). A class taking a submodule as a constructor argument (``ClassInfo.arguments``)
    holds it as a Sub with ``info`` None; its caller's Sub names the class passed (``body``)."""

    attr: str
    info: ClassInfo | None
    repeat: int | None
    make: str = ""
    body: ClassInfo | None = None  # the class of the submodule passed to ``info``'s constructor


@dataclass
class TapeEntry:
    key: str
    array: Array
    static: liveness.StaticLive | None
    full: bool


@dataclass
class ClassInfo:
    """A generated class and the facts its callers need."""

    key: str
    name: str
    source: str = ""
    ctor_symbols: list = field(default_factory=list)  # FreeNumerics, sorted by name
    kw_symbols: list = field(default_factory=list)  # data-fixed sizes the caller passes
    uses_tape: bool = False
    needs_quant: bool = False
    needs_stand_in: bool = False  # holds user data (codegen/fixed_data.py)
    user_data: tuple = ()  # titles of the user data it holds, its submodules' included
    needs_static: bool = False  # takes the static_shapes switch (a selection's pairs)
    input_static: tuple = ()
    outputs: list = field(default_factory=list)  # (Array, StaticLive | None, full)
    tape_after: dict = field(default_factory=dict)
    members: list = field(default_factory=list)
    pairs_outputs: tuple = ()  # per output: returned as a pairs array (pairs mode)
    output_names: tuple = ()  # per output: the name the class's own code gives it
    experts: tuple | None = None  # pairs mode: (EXPERT_DIMS, INPUT_RANKS) (codegen/experts.py)
    method: str | None = None  # a block with no state of its own: this method of the base class
    tables: tuple = ()  # (sites, real parts) of each rotary table the caller computes and passes
    arguments: tuple = ()  # submodules the constructor takes, after the config (codegen/bodies.py)
    parts: object = None  # the codegen.class_source.ClassParts its source was written from


def shape_text(array: Array) -> str:
    return "[" + ", ".join(comment_text(a.label, 20) for a in array.shape) + "]"
