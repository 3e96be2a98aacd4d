"""Inputs that real kernels can run on: integer arguments that index get values inside what they index.

MetaSchedule fills every argument with random values. For an embedding lookup (``take``, imported from ONNX
``Gather`` in TVM's "fast" mode, which does not check its indices) random int64 token ids read far out of bounds,
and the process that runs the kernel dies. So the bound of each integer argument is derived from the program itself:
wherever the argument's value (directly, or through intermediate buffers computed from it) is used as an index into
a buffer axis of extent ``E``, it gets values in ``[0, E)`` if TVM's arithmetic analyzer proves that every such use
then stays in range, else only zeros. Integer arguments that never index anything get ones (attention masks, and a
divisor is never zero).

``argument_bounds`` runs where the kernel is compiled (it needs TVM's IR); ``registry.measure.worker`` allocates the
values from the bounds, in the process that runs the kernel.
"""

from __future__ import annotations

from collections.abc import Iterator

from tvm import tirx
from tvm.ir.expr import TensorLoad
from tvm.s_tir.stmt import SBlock
from tvm.sym import Analyzer

from registry.tvm_side.onnx_inputs import ONES, ZEROS, Bound

_BINARY = (
    tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Div, tirx.Mod, tirx.Min, tirx.Max,
    tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE, tirx.And, tirx.Or,
)  # fmt: skip


class _Unknown(Exception):
    """An expression this analysis does not model: its argument is given zeros, the safe choice for an index."""


def argument_bounds(func: tirx.PrimFunc) -> list[Bound | None]:
    """For each parameter of ``func``: None for a non-integer buffer, else the bound its values are drawn from."""
    # A TVM 0.27 PrimFunc's buffer parameters are variables of buffer type: loads and stores name them directly.
    integer = {p.id_ for p in func.params if _is_integer(p.dtype)}
    analysis = _Analysis(integer)
    analysis.visit(func.body)
    out: list[Bound | None] = []
    for p in func.params:
        if p.id_ not in integer:
            out.append(None)
        elif p.id_ in analysis.unsafe:
            out.append(ZEROS)
        elif p.id_ in analysis.bound:
            out.append(Bound(0, analysis.bound[p.id_]))
        else:
            out.append(ONES)
    return out


def _is_integer(dtype) -> bool:
    text = str(dtype)
    return text.startswith(("int", "uint")) or text == "bool"


class _Analysis:
    def __init__(self, integer) -> None:
        self.integer = integer  # ids of the integer parameters
        self.x = tirx.Var("x", "int64")  # the value read from an integer parameter
        self.derived: dict = {}  # intermediate buffer id -> (parameter id, its value as an expression of x)
        self.bound: dict = {}  # parameter id -> exclusive upper bound of its values
        self.unsafe: set = set()  # parameters used as an index in a way the analysis cannot bound
        self.analyzer = Analyzer()

    def visit(self, stmt) -> None:
        if isinstance(stmt, SBlock):
            for iv in stmt.iter_vars:
                self.analyzer.bind(iv.var, iv.dom)
        if isinstance(stmt, tirx.BufferStore):
            self._store(stmt)
        for child in _children(stmt):
            self.visit(child)

    def _store(self, store: tirx.BufferStore) -> None:
        for load in _loads(store.value):
            self._indices(load.source, load.indices)
        self._indices(store.buffer, store.indices)
        try:
            source, expr = self._rewrite(store.value)
        except _Unknown:
            return
        if source is not None and store.buffer.id_ not in self.integer:
            self.derived[store.buffer.id_] = (source, expr)

    def _indices(self, buffer, indices) -> None:
        """Bound the parameters that ``buffer[indices]`` indexes with."""
        for axis, index in enumerate(indices):
            try:
                source, expr = self._rewrite(index)
            except _Unknown:
                for load in _loads(index):
                    source = self._source(load)
                    if source is not None:
                        self.unsafe.add(source)
                continue
            if source is None:
                continue
            largest = self._largest_in_range(expr, buffer.shape[axis])
            if largest == 0:
                self.unsafe.add(source)
            else:
                self.bound[source] = min(largest, self.bound.get(source, largest))

    def _largest_in_range(self, expr, extent) -> int:
        """The largest n <= extent such that every x in [0, n) keeps ``expr`` inside [0, extent); 0 if none does.
        Binary search: a larger n only adds values of x."""
        if not isinstance(extent, tirx.IntImm) or not self._in_range(expr, extent, 1):
            return 0
        low, high = 1, int(extent)  # low is in range; find the largest n that is
        while low < high:
            mid = (low + high + 1) // 2
            if self._in_range(expr, extent, mid):
                low = mid
            else:
                high = mid - 1
        return low

    def _in_range(self, expr, extent, n) -> bool:
        """Whether ``0 <= expr < extent`` for every x in [0, n)."""
        with self.analyzer.constraint_scope(tirx.all(self.x >= 0, self.x < tirx.const(int(n), "int64"))):
            return self.analyzer.can_prove(expr >= 0) and self.analyzer.can_prove(expr < extent)

    def _source(self, load: TensorLoad):
        buffer = load.source.id_
        if buffer in self.integer:
            return buffer
        if buffer in self.derived:
            return self.derived[buffer][0]
        return None

    def _rewrite(self, expr):
        """(the parameter ``expr`` depends on, ``expr`` with that parameter's loads replaced by x); (None, expr) when
        it reads no integer parameter. Raises _Unknown for several parameters or an expression not modelled here."""
        found: list = []

        def go(e):
            if isinstance(e, TensorLoad):
                source = self._source(e)
                if source is None:
                    raise _Unknown  # a value read from memory: nothing bounds it
                found.append(source)
                if e.source.id_ in self.integer:
                    dtype = str(e.source.dtype)
                    return self.x if dtype == "int64" else tirx.Cast(dtype, self.x)
                return self.derived[e.source.id_][1]
            if isinstance(e, (tirx.IntImm, tirx.Var)):
                return e
            if isinstance(e, tirx.Cast):
                return tirx.Cast(str(e.ty), go(e.value))
            if isinstance(e, _BINARY):
                return type(e)(go(e.a), go(e.b))
            if isinstance(e, tirx.Not):
                return tirx.Not(go(e.a))
            if isinstance(e, tirx.Select):
                return tirx.Select(go(e.condition), go(e.true_value), go(e.false_value))
            raise _Unknown

        if not any(True for _ in _loads(expr)):
            return None, expr
        rewritten = go(expr)
        if len(set(found)) != 1:
            raise _Unknown
        return found[0], rewritten


def _children(stmt) -> Iterator:
    for name in ("seq", "body", "block", "init", "then_case", "else_case"):
        child = getattr(stmt, name, None)
        if child is None:
            continue
        if isinstance(child, (list, tuple)) or type(child).__name__ == "Array":
            yield from child
        else:
            yield child


def _loads(expr) -> Iterator[TensorLoad]:
    """Every load inside ``expr``, outermost first."""
    if isinstance(expr, TensorLoad):
        yield expr
        for index in expr.indices:
            yield from _loads(index)
        return
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, name, None)
        if isinstance(child, tirx.Expr):
            yield from _loads(child)
    for arg in getattr(expr, "args", ()) or ():
        yield from _loads(arg)
