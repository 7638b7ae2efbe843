"""torch.utils.tensorboard's `SummaryWriter`: TensorBoard event files written with the `tensorboard`
package's own event writer and protos (imported when a writer is made, never at `import tg`; the extra
pip install -e ".[metrics]"), and always a JSON-lines log beside them, `<log_dir>/metrics.jsonl`.

Each add_* call queues one JSON object per value, {"step": int|null, "wall_time": float, "tag": str,
"value": ...}: a scalar's float (NaN/inf as null plus "nonfinite": "nan"/"inf"/"-inf", as JSON has none;
the event file keeps the float), a histogram's {min, max, mean, std, count}, a text's string. The queue
is appended on flush(), close(), every `max_queue` lines and at the first add_* `flush_secs` after the
last write (no background thread); a crash can cut only the last line, which `read_jsonl` skips and the
next writer on that log_dir drops.

Several processes: a writer per rank is the script's choice; torch scripts write from rank 0 only
(`writer = SummaryWriter() if dist.get_rank() == 0 else None`). Two writers must not share a log_dir.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from tg.core.tensor import Tensor
from tg.nn.state import write_atomic
from tg.utils.warn import warn_once

JSONL_NAME = "metrics.jsonl"
INSTALL_HINT = 'install the tensorboard extra: pip install -e ".[metrics]" (or pip install tensorboard)'
# TensorFlow's default histogram edges: +-1e-12 growing by 10% to +-1e20, and 0
_POSITIVE_EDGES = 1e-12 * 1.1 ** np.arange(math.ceil(32 / math.log10(1.1)))
_TENSORFLOW_EDGES = np.concatenate([-_POSITIVE_EDGES[::-1], [0.0], _POSITIVE_EDGES])


def _load_tensorboard(required: bool | None) -> Any:
    """The tensorboard package's event writer and protos, or None when missing and not required."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as e:
        if required:
            raise ImportError(f"[tensorboard] SummaryWriter(tensorboard=True): {e}; {INSTALL_HINT}") from e
        return None
    return SimpleNamespace(Event=event_pb2.Event, SessionLog=event_pb2.SessionLog,
                           Summary=summary_pb2.Summary, EventFileWriter=EventFileWriter)


def _numeric(value: Any, what: str) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.numpy()
    arr = np.asarray(value) if isinstance(value, (int, float, list, tuple, np.ndarray, np.generic)) else None
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(f"[tensorboard] {what}: expected a real number, numpy array or tg.Tensor, got "
                        f"{type(value).__name__} {value!r:.60}")
    return arr


def _scalar(value: Any, what: str) -> int | float:
    arr = _numeric(value, what)
    if arr.size != 1:
        raise ValueError(f"[tensorboard] {what}: expected one value (a number, 0-d array or 1-element "
                         f"Tensor), got shape {arr.shape}; log its .mean() or .item(), or use add_histogram")
    return arr.reshape(()).item()


def _step(step: Any) -> int | None:
    value = None if step is None else _scalar(step, "global_step")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"[tensorboard] global_step: expected a whole number, got {value}; pass int(step)")
    return None if value is None else int(value)


def _histogram(values: np.ndarray, bins: str | int, max_bins: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of the values' non-empty range of buckets, at most max_bins of them."""
    if isinstance(bins, str) and bins == "tensorflow":
        lo, hi = values.min(), values.max()   # values past +-1e20 get a bucket of their own
        edges = np.concatenate([values[:0] if lo >= _TENSORFLOW_EDGES[0] else [lo], _TENSORFLOW_EDGES,
                                values[:0] if hi <= _TENSORFLOW_EDGES[-1] else [hi]])
        counts, edges = np.histogram(values, bins=edges)
    else:
        counts, edges = np.histogram(values, bins=bins)
    nonzero = np.flatnonzero(counts)
    counts, edges = counts[nonzero[0]:nonzero[-1] + 1], edges[nonzero[0]:nonzero[-1] + 2]
    if max_bins is not None and max_bins < 1:
        raise ValueError(f"[tensorboard] add_histogram: expected max_bins >= 1 or None, got {max_bins}")
    if max_bins is not None and len(counts) > max_bins:   # merge runs of `group` neighbouring buckets
        group = -(-len(counts) // max_bins)
        padded = np.concatenate([counts, np.zeros(-len(counts) % group, counts.dtype)])
        edges = np.concatenate([edges[::group], edges[-1:] if len(counts) % group else []])
        counts = padded.reshape(-1, group).sum(axis=1)
    return edges, counts


def _json_value(value: float) -> dict[str, Any]:
    if math.isfinite(value):
        return {"value": value}
    return {"value": None, "nonfinite": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a SummaryWriter's metrics.jsonl, in order; a last line cut short by a crash is
    skipped, any other line that is not JSON raises ValueError.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with SummaryWriter(d, tensorboard=False) as w:
    ...     w.add_scalar("loss", 0.5, global_step=3, walltime=1.0)
    >>> read_jsonl(os.path.join(d, "metrics.jsonl"))
    [{'step': 3, 'wall_time': 1.0, 'tag': 'loss', 'value': 0.5}]
    """
    with open(path, "rb") as f:          # bytes: a cut line may end inside a character
        lines = f.read().split(b"\n")[:-1]   # the part after the last newline is empty or cut short
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"[tensorboard] read_jsonl: line {number} of {path} is not JSON ({e}): "
                             f"{line[:80]!r}; was it written by something other than SummaryWriter?") from e
    return records


class SummaryWriter:
    """torch.utils.tensorboard.SummaryWriter: add_scalar, add_scalars, add_histogram, add_text, flush,
    close, and `with`. `tensorboard`: None uses the package when it is installed and otherwise warns once
    and writes only the JSONL; True requires it (ImportError); False writes only the JSONL. `purge_step`
    hides the log_dir's earlier records at that step or later (TensorBoard's SessionLog.START; the JSONL
    is rewritten without them), as when a run resumes from a checkpoint.

    >>> import tempfile
    >>> with SummaryWriter(tempfile.mkdtemp(), tensorboard=False) as w:
    ...     w.add_scalars("loss", {"train": 0.9, "val": 1.1}, global_step=0)
    ...     w.add_histogram("weights", [0.1, 0.2, 0.3, 0.9], global_step=0)
    ...     w.add_text("note", "lr = 3e-4")
    >>> [r["tag"] for r in read_jsonl(w.log_dir + "/metrics.jsonl")]
    ['loss/train', 'loss/val', 'weights', 'note']
    """

    def __init__(self, log_dir: str | None = None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: float = 120, filename_suffix: str = "", *,
                 tensorboard: bool | None = None) -> None:
        if log_dir is None:
            now = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{now}_{socket.gethostname()}{comment}")
        self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix = (
            str(log_dir), max_queue, flush_secs, filename_suffix)
        self._tb = None if tensorboard is False else _load_tensorboard(tensorboard)
        if self._tb is None and tensorboard is None:
            warn_once("tensorboard-missing", f"[tensorboard] the tensorboard package is not installed, so "
                                             f"SummaryWriter writes only {JSONL_NAME}; {INSTALL_HINT}")
        os.makedirs(self.log_dir, exist_ok=True)
        self._jsonl_path = os.path.join(self.log_dir, JSONL_NAME)
        purge_step = _step(purge_step)
        self._repair_jsonl(purge_step)
        self._pending: list[str] = []
        self._last_write, self._closed = time.monotonic(), False
        self._event_writers: dict[str, Any] = {}
        self._events(self.log_dir)   # torch makes the main event file at once, even with nothing logged
        if self._tb is not None and purge_step is not None:
            start = self._tb.SessionLog(status=self._tb.SessionLog.START)
            self._events(self.log_dir).add_event(self._tb.Event(step=purge_step, session_log=start))

    def get_logdir(self) -> str:
        """The directory the records go to (torch's name for `log_dir`)."""
        return self.log_dir

    def _repair_jsonl(self, purge_step: int | None) -> None:
        # drop a last line cut short by a crash (else the next append would join it) and purged records;
        # the whole file is rewritten, so through a temporary file and an atomic rename
        if not os.path.exists(self._jsonl_path):
            return
        with open(self._jsonl_path, "rb") as f:
            f.seek(max(os.path.getsize(self._jsonl_path) - 1, 0))
            whole = f.read(1) in (b"", b"\n")
        if whole and purge_step is None:
            return
        records = [r for r in read_jsonl(self._jsonl_path)
                   if purge_step is None or r["step"] is None or r["step"] < purge_step]
        kept = "".join(json.dumps(r, allow_nan=False) + "\n" for r in records)
        write_atomic(self._jsonl_path, kept.encode())

    def _events(self, run_dir: str) -> Any:
        """The event file writer of one run directory (the log_dir, or one of add_scalars' sub-runs)."""
        if self._tb is not None and run_dir not in self._event_writers:
            self._event_writers[run_dir] = self._tb.EventFileWriter(
                run_dir, self.max_queue, self.flush_secs, self.filename_suffix)
        return self._event_writers.get(run_dir)

    def _record(self, what: str, tag: str, step: Any, walltime: Any, record: dict[str, Any],
                value: dict[str, Any], run_dir: str | None = None) -> None:
        """Queue a JSONL line (`record` under `tag`) and write an event of one Summary.Value: `tag` and the
        fields in `value`, which may give another tag."""
        if self._closed:
            raise ValueError(f"[tensorboard] {what}: the writer of {self.log_dir} is closed; make a new one")
        step = _step(step)
        wall_time = time.time() if walltime is None else float(_scalar(walltime, f"{what} walltime"))
        line = json.dumps({"step": step, "wall_time": wall_time, "tag": tag, **record}, allow_nan=False)
        self._pending.append(line + "\n")
        if self._tb is not None:   # proto3: step 0 and no step are the same event
            summary = self._tb.Summary(value=[self._tb.Summary.Value(**{"tag": tag, **value})])
            event = self._tb.Event(wall_time=wall_time, step=step or 0, summary=summary)
            self._events(run_dir or self.log_dir).add_event(event)
        if len(self._pending) >= self.max_queue or time.monotonic() - self._last_write >= self.flush_secs:
            self._write_jsonl()

    def _write_jsonl(self) -> None:
        # whole lines appended in one go: a process killed inside it can cut only the last one
        with open(self._jsonl_path, "a", encoding="utf-8") as f:
            f.writelines(self._pending)
        self._pending.clear()
        self._last_write = time.monotonic()

    def add_scalar(self, tag: str, scalar_value: Any, global_step: Any = None, walltime: Any = None) -> None:
        """Log one number (python or numpy number, 0-d array, or 1-element tg.Tensor) under `tag`."""
        value = float(_scalar(scalar_value, f"add_scalar({_tag(tag)!r}) scalar_value"))
        self._record("add_scalar", tag, global_step, walltime, _json_value(value), {"simple_value": value})

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict[str, Any], global_step: Any = None,
                    walltime: Any = None) -> None:
        """Log several numbers on one chart: as torch, each in its own run `<log_dir>/<main_tag>_<tag>`
        under the tag `main_tag`; in the JSONL as tags `<main_tag>/<tag>`."""
        if not isinstance(tag_scalar_dict, dict):
            raise TypeError(f"[tensorboard] add_scalars({_tag(main_tag)!r}): expected a dict of tag -> "
                            f"number, got {type(tag_scalar_dict).__name__}")
        values = {_tag(k): float(_scalar(v, f"add_scalars({main_tag!r}) {k!r}"))
                  for k, v in tag_scalar_dict.items()}
        walltime = time.time() if walltime is None else walltime   # one time for the chart's points
        for tag, value in values.items():
            self._record("add_scalars", f"{main_tag}/{tag}", global_step, walltime, _json_value(value),
                         {"tag": main_tag, "simple_value": value},
                         os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{tag}"))

    def add_histogram(self, tag: str, values: Any, global_step: Any = None, bins: str | int = "tensorflow",
                      walltime: Any = None, max_bins: int | None = None) -> None:
        """Log the distribution of `values` (numpy array, list or tg.Tensor; finite, at least one).
        `bins`: "tensorflow" (TensorFlow's exponential edges), a count, or any of numpy.histogram's names
        ("auto", "fd", ...); empty buckets at either end are dropped, then runs of neighbours merged to
        at most `max_bins`."""
        data = _numeric(values, f"add_histogram({_tag(tag)!r}) values").astype(np.float64).ravel()
        if data.size == 0 or not np.isfinite(data).all():
            raise ValueError(f"[tensorboard] add_histogram({tag!r}): expected at least one value, all "
                             f"finite, got {data.size} values, {int((~np.isfinite(data)).sum())} not finite; "
                             f"log values[np.isfinite(values)] and count the rest with add_scalar")
        edges, counts = _histogram(data, bins, max_bins)
        stats = {"min": float(data.min()), "max": float(data.max()), "mean": float(data.mean()),
                 "std": float(data.std()), "count": int(data.size)}
        # bucket i holds the values up to bucket_limit[i]; TensorBoard draws the first one from `min`
        histo = {"min": stats["min"], "max": stats["max"], "num": data.size, "sum": float(data.sum()),
                 "sum_squares": float(data @ data), "bucket_limit": edges[1:].tolist(),
                 "bucket": counts.tolist()}
        self._record("add_histogram", tag, global_step, walltime, {"value": stats}, {"histo": histo})

    def add_text(self, tag: str, text_string: str, global_step: Any = None, walltime: Any = None) -> None:
        """Log a (markdown) string, shown on TensorBoard's text dashboard under `tag`."""
        if not isinstance(text_string, str):
            raise TypeError(f"[tensorboard] add_text({_tag(tag)!r}): expected a str, "
                            f"got {type(text_string).__name__}")
        # the text plugin's summary: a string tensor under its plugin name (TextPluginData v0 is no bytes)
        self._record("add_text", tag, global_step, walltime, {"value": text_string},
                     {"metadata": {"plugin_data": {"plugin_name": "text"}},
                      "tensor": {"dtype": "DT_STRING", "string_val": [text_string.encode("utf-8")]}})

    def flush(self) -> None:
        """Write every queued record to disk: the JSONL and each event file."""
        if not self._closed:
            self._write_jsonl()
            for writer in self._event_writers.values():
                writer.flush()

    def close(self) -> None:
        """Flush and close the files; a second close does nothing, an add_* after it raises."""
        if not self._closed:
            self.flush()
            for writer in self._event_writers.values():
                writer.close()
            self._closed = True

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tag(tag: Any) -> str:
    if not isinstance(tag, str):
        raise TypeError(f"[tensorboard] tag: expected a str, got {type(tag).__name__} {tag!r:.60}")
    return tag
