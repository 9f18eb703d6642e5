"""What every renderer shares: the ``Renderer`` base, display names and host-clock op timings.

Renderers are pure functions of a :class:`~aitune_dispatch.results.ProfileResult` (no torch import),
one output format per file, each declaring its file extension so a caller can pick one by the
output's name (as pyinstrument's renderers do).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from ..results import ProfileResult

OP_TIMES = pa.schema([("op_id", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("thread", pa.int64())])


class Renderer(ABC):
    """Turns a result into the text of one file format."""

    extension: ClassVar[str]

    @abstractmethod
    def render(self, result: ProfileResult) -> str:
        """The whole file's text."""

    def write(self, result: ProfileResult, path: str | Path) -> Path:
        """Render ``result`` into ``path`` (parent folders are created) and return the path."""
        target = Path(path)
        if target.is_dir():
            example = target / f"report{self.extension}"
            raise IsADirectoryError(f"{target} is a folder; pass a file name such as {example}")
        text = self.render(result)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target


def module_label(name: str | None, module_type: str | None) -> str:
    """How a module is shown: its qualified name, or ``Type (root)`` for the unnamed root."""
    if name:
        return name
    return f"{module_type or 'module'} (root)"


def module_labels(result: ProfileResult) -> dict[int, tuple[str, str]]:
    """``module_id -> (label, module_type)`` for every module of the result."""
    modules = result.modules.to_pydict()
    return {
        module_id: (module_label(name, kind), kind or "")
        for module_id, name, kind in zip(modules["module_id"], modules["module_name"], modules["module_type"])
    }


def _timed_ops(ops: pa.Table) -> pa.Table:
    stamped = ops.filter(pc.greater(ops["start_ns"], 0))
    end = pc.max_element_wise(stamped["end_ns"], stamped["start_ns"])  # an op an exception left open
    return pa.table([stamped["op_id"], stamped["start_ns"], end, stamped["thread"]], schema=OP_TIMES)


def _ops_from_cpu_activity(result: ProfileResult) -> pa.Table:
    rows = result.activity.filter(
        pc.and_(pc.equal(result.activity["kind"], "cpu_op"), pc.is_valid(result.activity["op_id"]))
    )
    spans = rows.group_by("op_id").aggregate([("start_ns", "min"), ("end_ns", "max")])
    spans = spans.join(result.ops.select(["op_id", "thread"]), "op_id", join_type="left outer")
    return spans.select(["op_id", "start_ns_min", "end_ns_max", "thread"]).rename_columns(OP_TIMES.names).cast(OP_TIMES)


def op_times(result: ProfileResult) -> pa.Table:
    """Host-clock ``(op_id, start_ns, end_ns, thread)`` of every op whose time is known.

    From the ops table's own ``start_ns``/``end_ns`` where it has them; otherwise, for the CPU
    activity source, from each op's CPU "kernel" rows (timed inside the same dispatch). Ops of a
    CUDA result without host timestamps have no known time and are left out.
    """
    if "start_ns" in result.ops.column_names and "end_ns" in result.ops.column_names:
        return _timed_ops(result.ops)
    if result.activity.num_rows and "cpu_op" in set(result.activity["kind"].unique().to_pylist()):
        return _ops_from_cpu_activity(result)
    return OP_TIMES.empty_table()
