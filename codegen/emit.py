"""Small pieces of code emission: size expressions, function bodies, dim alignment.

Generated tensors always carry their array dims *last*; any number of leading dims (batch dims,
or the degree of an enclosing box) may precede them, so every dim is addressed from the right
(negative dims, ``...`` in einsum and indexing).
"""
from __future__ import annotations

import contextlib

import sympy

from ncdc.ir.errors import SpecError

from .names import Namer
from .passes import fold_rounding
from .statements import ASSIGN, EXPR, Rounding, Statement


class SizePrinter:
    """Prints integer size/stride/shift expressions as exact Python integer code.

    A rational expression ``n / d`` (integer polynomials) prints as ``n // d``: its floor,
    exact when the value is an integer (as sizes are) and the floor a natural bound means
    otherwise. Anything else (``sqrt(2)``, a float) is a :class:`SpecError`, never a silent
    approximation. The result is safe as an operand of ``*`` (a sum or quotient is
    parenthesised). ``symbol_code(sym)`` gives the code for one symbol (``self.m``, ``m`` or a
    local ``b``) and records its use."""

    def __init__(self, symbol_code):
        self.symbol_code = symbol_code

    def __call__(self, expr) -> str:
        e = sympy.sympify(expr)
        if e.is_Integer:
            return str(int(e))
        num, den = sympy.fraction(sympy.together(e))
        if den == 1:
            return self._print(num, 2)
        return f"({self._print(num, 2)} // {self._print(den, 3)})"

    def _print(self, e, prec: int) -> str:  # noqa: C901 - one branch per kind of sympy node
        if isinstance(e, sympy.Symbol):
            return self.symbol_code(e)
        if e.is_Integer:
            v = int(e)
            return f"({v})" if v < 0 and prec > 0 else str(v)
        if e.is_Rational:
            return self._wrap(f"{e.p} // {e.q}", 3, prec + 1)
        if e.is_Add:
            terms = sorted(e.args, key=lambda t: (t.is_Number, sympy.default_sort_key(t)))
            out = self._print(terms[0], 1)
            for t in terms[1:]:
                coeff, _ = t.as_coeff_Mul()
                if coeff.is_negative:
                    out += " - " + self._print(-t, 2)
                else:
                    out += " + " + self._print(t, 1)
            return self._wrap(out, 1, prec)
        if e.is_Mul:
            num, den = [], []
            for f in e.as_ordered_factors():
                if f.is_Pow and f.exp.is_negative:
                    den.append(f.base ** (-f.exp))
                elif f.is_Rational and not f.is_Integer:
                    if f.p != 1:
                        num.append(sympy.Integer(f.p))
                    den.append(sympy.Integer(f.q))
                else:
                    num.append(f)
            if len(num) == 1 and num[0] == -1 and not den:
                return "-1"
            if num and num[0] == -1:
                return self._wrap("-" + self._print(sympy.Mul(*num[1:]) if len(num) > 1
                                                    else sympy.Integer(1), 3), 2, prec)
            out = " * ".join(self._print(f, 2) for f in num) if num else "1"
            for d in den:
                out += " // " + self._print(d, 3)
            return self._wrap(out, 2, prec)
        if e.is_Pow and e.exp.is_Integer and e.exp.is_negative:
            return self._wrap(f"1 // {self._print(e.base ** -e.exp, 3)}", 2, prec)
        if e.is_Pow and all(n.is_Integer for n in e.atoms(sympy.Number)):
            return self._wrap(f"{self._print(e.base, 4)} ** {self._print(e.exp, 4)}", 3, prec)
        raise SpecError(f"size expression {sympy.sstr(e)} cannot be printed as integer code")

    @staticmethod
    def _wrap(text: str, own: int, outer: int) -> str:
        return f"({text})" if own < outer else text


class FunctionWriter:
    """The statements of one method body (:mod:`codegen.statements`) with a namespace of
    locals."""

    def __init__(self, indent: str = "        ", taken=()):
        self.indent = indent
        self.body: list[Statement] = []
        self.names = Namer(taken)
        self.bound: list[str] = []
        self.pending: str | None = None
        self.held_in: dict[str, str] = {}  # local -> the encoding emulate mode rounded it to
        self.depth = 0

    def _add(self, kind: str, expr: str, targets=(), comment: str | None = None,
             rounding: Rounding | None = None) -> None:
        headings = ()
        if self.pending:
            headings, self.pending = (self.pending,), None
        self.body.append(Statement(kind, expr, tuple(targets), rounding, comment or None,
                                   headings, self.depth))

    def assign(self, targets, expr: str, comment: str | None = None,
               rounding: Rounding | None = None) -> None:
        """``targets = expr`` (``targets``: one name, a subscript's code, or a tuple of them)."""
        self._add(ASSIGN, expr, (targets,) if isinstance(targets, str) else targets, comment,
                  rounding)

    def call(self, expr: str, comment: str | None = None) -> None:
        """An expression statement (a call made for its effect)."""
        self._add(EXPR, expr, (), comment)

    def round(self, name: str, rounding: Rounding, comment: str | None = None) -> None:
        """``name = self.held(name, ...)``, folded into the statement binding ``name`` where the
        statements since (a mask, a heading) do not read it: one statement per operation."""
        if self.pending is None and self.depth == 0 and name.isidentifier() and \
                fold_rounding(self.body, name, rounding):
            return
        self.assign(name, name, comment, rounding)

    @contextlib.contextmanager
    def nested(self, kind: str, expr: str, target: str | None = None,
               comment: str | None = None):
        """``if expr:`` (``IF``) or ``for target in expr:`` (``FOR``); the statements added
        inside the ``with`` are its body."""
        self._add(kind, expr, (target,) if target else (), comment)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def comment(self, text: str) -> None:
        """A heading comment for the next statement (dropped if none follows)."""
        self.pending = text

    def bind(self, base: str, expr: str, comment: str | None = None,
             rounding: Rounding | None = None) -> str:
        """``name = expr`` with a fresh local name derived from ``base``; returns the name."""
        name = self.names.fresh(base)
        self.assign(name, expr, comment, rounding)
        self.bound.append(name)
        return name


def is_atom(expr: str) -> bool:
    """True when ``expr`` can take a method call or subscript without parentheses."""
    depth = 0
    for i, ch in enumerate(expr):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch in " +-*/%<>=&|~^@!,":
            if ch == "-" and i == 0:
                return False
            return False
    return True


def atom(expr: str) -> str:
    return expr if is_atom(expr) else f"({expr})"


def align_code(expr: str, src: list, dst: list) -> str:
    """Code rearranging the trailing dims of ``expr`` from labels ``src`` to labels ``dst``:
    repeated labels become diagonals, order is fixed with ``transpose``/``movedim``, labels
    missing from ``src`` become new size-1 dims. Every label of ``src`` must be in ``dst``."""
    cur = list(src)
    code = expr
    extra = [lab for lab in cur if lab not in dst]
    if extra:
        raise AssertionError(f"align: labels {extra} would be dropped")
    while True:
        dup = next((lab for i, lab in enumerate(cur) if lab in cur[i + 1:]), None)
        if dup is None:
            break
        i = cur.index(dup)
        j = cur.index(dup, i + 1)
        n = len(cur)
        code = f"torch.diagonal({code}, dim1={i - n}, dim2={j - n})"
        cur = [lab for k, lab in enumerate(cur) if k not in (i, j)] + [dup]
    present = [lab for lab in dst if lab in cur]
    if cur != present:
        code = atom(code) + permute_suffix(cur, present)
        cur = present
    if len(cur) < len(dst):
        first = next(i for i, lab in enumerate(dst) if lab not in cur)
        idx = ["..."] + ["None" if lab not in cur else ":" for lab in dst[first:]]
        code = atom(code) + "[" + ", ".join(idx) + "]"
    return code


def permute_suffix(cur: list, want: list) -> str:
    """Method-call suffix reordering trailing dims from ``cur`` to ``want`` (same labels)."""
    n = len(cur)
    pos = [cur.index(lab) for lab in want]  # want[k] comes from cur[pos[k]]
    moved = [k for k in range(n) if pos[k] != k]
    if len(moved) == 2 and pos[moved[0]] == moved[1] and pos[moved[1]] == moved[0]:
        return f".transpose({moved[0] - n}, {moved[1] - n})"
    # one dim moved: remove it and the rest keep their order
    for s in range(n):
        rest = [i for i in range(n) if i != s]
        for d in range(n):
            trial = rest[:d] + [s] + rest[d:]
            if trial == pos:
                return f".movedim({s - n}, {d - n})"
    srcs = ", ".join(str(p - n) for p in pos)
    dsts = ", ".join(str(k - n) for k in range(n))
    return f".movedim(({srcs}), ({dsts}))"


def einsum_letters(labels_in_order: list, hint) -> dict:
    """A distinct ASCII letter per label (``torch.einsum`` takes a-z, A-Z), preferring the
    first ASCII letter of ``hint(label)``."""
    out: dict = {}
    used: set[str] = set()
    for lab in labels_in_order:
        if lab in out:
            continue
        word = "".join(ch for ch in str(hint(lab)).lower() if ch in _LOWER)
        pick = next((ch for ch in word if ch not in used), None)
        if pick is None:
            pick = next((ch for ch in _LOWER + _LOWER.upper() if ch not in used), None)
        if pick is None:
            raise SpecError("an einsum over more than 52 distinct axes")
        used.add(pick)
        out[lab] = pick
    return out


_LOWER = "abcdefghijklmnopqrstuvwxyz"


def _assignment(code: str) -> tuple[str, str] | None:
    """(targets, value) of a printed line ``names = value`` whose targets are plain names
    separated by ``, ``, else None."""
    rest = code.lstrip()
    at = rest.find(" = ")
    if at < 0:
        return None
    targets = rest[:at]
    if not all(t.isascii() and t.isidentifier() for t in targets.split(", ")):
        return None
    return targets, rest[at + 3:]


def _split_comment(line: str) -> tuple[str, str]:
    depth_q = None
    i = 0
    while i < len(line):
        ch = line[i]
        if depth_q:
            if ch == "\\":
                i += 2
                continue
            if ch == depth_q:
                depth_q = None
        elif ch in "'\"":
            depth_q = ch
        elif ch == "#" and line[i - 2:i] == "  ":
            return line[:i - 2], line[i:]
        i += 1
    return line, ""


def _scan(code: str):
    """(index, char, depth) for every character outside string literals."""
    depth, quote, i = 0, None, 0
    while i < len(code):
        ch = code[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
            i += 1
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            yield i, ch, depth
            depth += 1
            i += 1
            continue
        elif ch in ")]}":
            depth -= 1
        yield i, ch, depth
        i += 1


def _pack(pieces: list[str], indent: str, limit: int, first_prefix: str) -> list[str]:
    lines, cur = [], first_prefix
    for _k, piece in enumerate(pieces):
        sep = "" if cur.endswith(("(", "[", "{")) or cur == indent else " "
        if len(cur) + len(sep) + len(piece) > limit and cur.strip() and cur != first_prefix:
            lines.append(cur.rstrip())
            cur = indent + piece
        else:
            cur = cur + sep + piece if cur.strip() else indent + piece
    lines.append(cur)
    return lines


def _hugged(head: str, arg: str, tail: str, indent: str, limit: int) -> list[str] | None:
    """A call's one argument that is itself a call with several arguments, its bracket kept on
    the first line (``nn.Parameter(torch.empty(`` then the arguments, hanging), or None."""
    opens = [i for i, ch, d in _scan(arg) if ch == "(" and d == 0]
    if not opens or not arg.endswith(")") or not arg[:opens[0]].replace(".", "_").isidentifier():
        return None
    k = opens[0]
    args, start = [], k + 1
    for j, ch, d in _scan(arg[k:]):
        if d == 0 and ch == ")" and k + j != len(arg) - 1:
            return None  # the argument is more than one call
        if d == 1 and ch == ",":
            args.append(arg[start:k + j + 1].strip())
            start = k + j + 1
    if not args:
        return None
    args.append(arg[start:-1].strip())
    first = head + arg[:k + 1]
    end = ")" + tail
    body = _pack([a for a in args if a], indent + "    ", limit - len(end), indent + "    ")
    out = [first] + body[:-1] + [body[-1] + end]
    return out if all(len(ln) <= limit for ln in out) else None


def wrap_line(line: str, limit: int = 100) -> list[str]:  # noqa: C901 - one branch per way to break a line: comment, call, operator
    """PEP 8 wrapping of one generated statement: a long trailing comment moves above, a call
    breaks between its arguments, aligned with its opening bracket where that takes fewer lines,
    else after the bracket (hanging indent), a long expression is parenthesised and breaks
    before its operators."""
    if len(line) <= limit or len(line) > 40 * limit:  # past 40 lines' worth: an unbreakable
        return [line]  # name from the spec; rescanning it per break would cost quadratic time
    indent = line[:len(line) - len(line.lstrip())]
    code, comment = _split_comment(line)
    code = code.rstrip()
    if comment:
        head = [indent + comment] if len(indent + comment) <= limit + 20 else []
        return head + wrap_line(code, limit)
    m = _assignment(code)
    lhs = m[0] + " = " if m else ""
    rhs = m[1] if m else code.strip()
    if m and ", " in m[0] and len(indent + lhs) > limit // 2:
        # a long tuple target: parenthesise it and break after its commas
        names = [n + "," for n in m[0].split(", ")]
        names[-1] = names[-1][:-1] + ") = " + rhs
        packed = _pack(names, indent + " ", limit, indent + "(")
        return packed[:-1] + wrap_line(packed[-1], limit)
    at_if = [i for i, ch, d in _scan(rhs) if d == 0 and rhs.startswith(" if ", i)]
    at_else = [i for i, ch, d in _scan(rhs) if d == 0 and rhs.startswith(" else ", i)]
    if m and len(at_if) == 1 and len(at_else) == 1 and at_if[0] < at_else[0]:
        first = indent + lhs + "(" + rhs[:at_else[0]]
        second = " " * len(indent + lhs + "(") + rhs[at_else[0] + 1:] + ")"
        if len(first) <= limit and len(second) <= limit:
            return [first, second]
    # operators at depth 0 of the right-hand side
    ops = [i for i, ch, d in _scan(rhs) if d == 0 and ch in "+-*/@&|" and i > 0
           and rhs[i - 1] == " " and i + 1 < len(rhs) and rhs[i + 1] in " */"]
    if ops:
        pieces, start = [], 0
        for i in ops:
            pieces.append(rhs[start:i].strip())
            start = i
        pieces.append(rhs[start:].strip())
        if m:
            first = indent + lhs + "("
            out = _pack(pieces, " " * len(first), limit - 1, first)
            out[-1] += ")"
        else:  # already inside brackets: break before the operators
            out = _pack(pieces, indent, limit, indent)
        if all(len(ln) <= limit for ln in out) or len(out) > 1:
            return [w for ln in out for w in (wrap_line(ln, limit) if len(ln) > limit
                                              and ln is not out[0] else [ln])]
    # the first bracket whose contents hold top-level commas
    for i, ch, d in _scan(rhs):
        if ch not in "([" or d != 0:
            continue
        close = None
        args, start = [], i + 1
        for j, c2, d2 in _scan(rhs[i:]):
            if j == 0:
                continue
            if d2 == 0 and c2 in ")]":
                close = i + j
                break
            if d2 == 1 and c2 == ",":
                args.append(rhs[start:i + j + 1].strip())
                start = i + j + 1
        if close is None or not args:
            continue
        args.append(rhs[start:close].strip())
        tail = rhs[close:]
        first = indent + lhs + rhs[:i + 1]
        pieces = [a for a in args if a]
        body = _pack(pieces, indent + "    ", limit - len(tail), indent + "    ")
        hanging = [first] + body[:-1] + [body[-1] + tail]
        # aligned with the opening bracket where that takes fewer lines
        aligned = _pack(pieces, " " * len(first), limit - len(tail), first)
        aligned[-1] += tail
        if len(aligned) < len(hanging) and all(len(ln) <= limit for ln in aligned):
            return aligned
        return hanging
    # one long argument: break after the first bracket
    for i, ch, d in _scan(rhs):
        if ch in "([" and d == 0:
            close = next((i + j for j, c2, d2 in _scan(rhs[i:]) if j and d2 == 0
                          and c2 in ")]"), None)
            if close is None:
                break
            inner = indent + "    " + rhs[i + 1:close] + rhs[close:]
            if len(inner) <= limit:
                return [indent + lhs + rhs[:i + 1], inner]
            deeper = wrap_line(inner, limit)
            hugged = _hugged(indent + lhs + rhs[:i + 1], rhs[i + 1:close], rhs[close:], indent,
                             limit)
            if hugged is not None and len(hugged) <= len(deeper) + 1:
                return hugged
            if len(deeper) > 1:
                return [indent + lhs + rhs[:i + 1]] + deeper
            break
    return [line]
