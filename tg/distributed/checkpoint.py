"""Training checkpoints that survive a crash mid-save and load at another world size.

    import tg.distributed as dist
    dist.save_checkpoint("out/ckpt", step, model, opt, extra={"data": loader.state_dict()})
    meta = dist.load_checkpoint("out/ckpt", model, opt)     # None when there is no checkpoint yet
    start = meta["step"] if meta else 0

Every rank calls both, in step. On disk (a directory every rank can reach):

    out/ckpt/latest                          the name of the newest complete checkpoint
    out/ckpt/step-00000100/model.safetensors the whole model (rank 0); `safe_load` reads it alone
    out/ckpt/step-00000100/optim-00001-of-00004.safetensors
                                             a ZeroOptimizer's shard, one file per rank, with an index
                                             of the flat ranges it holds in its metadata (under FSDP:
                                             each shard's state rows by parameter name, and which rows)
    out/ckpt/step-00000100/optim.safetensors a plain (replicated) optimizer's state (rank 0)
    out/ckpt/step-00000100/meta.json         step, world size, files, each rank's RNG state, extra

Files are written atomically into `step-N.partial/`; once every rank has written, rank 0 writes
meta.json, renames the directory to `step-N` and only then points `latest` at it. A crash at any
moment leaves `latest` naming the last complete checkpoint. ZeroOptimizer shards saved at N ranks
load at any M: each rank reads, from the old shards' indexes, the pieces overlapping its new shard.
An FSDP model (tg.distributed.fsdp) is written whole all the same, gathered one unit at a time, and each
rank reads back only its rows of each parameter (tg.nn.state.safe_read_rows).

What a crash leaves behind (a `step-N.partial/`, or a `step-N.replaced/` whose replacement is complete
and named by `latest`) is removed, with a warning saying what and why, by rank 0 the first time this
process loads from or saves into the directory: no save of this job can be in progress then, since
every rank calls both in step and rank 0 creates each save's `.partial` itself. The directory belongs
to one job at a time.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from tg.core.tensor import Tensor
from tg.distributed import fsdp
from tg.distributed.ddp import _world
from tg.nn.state import (
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    write_atomic,
)

FORMAT = "tg-checkpoint-1"
log = logging.getLogger("tg.distributed.checkpoint")
_tidied: set[Path] = set()      # directories this process has cleaned of an earlier run's leftovers


def _unwrap(model: Any) -> Any:
    from tg.distributed.ddp import DistributedDataParallel
    return model.module if isinstance(model, DistributedDataParallel) else model


def _barrier(group: Any) -> None:
    import tg.distributed as dist
    if _world(group)[1] > 1:
        dist.barrier(group)


def _gather_json(obj: Any, group: Any) -> list[Any]:
    import tg.distributed as dist
    size = _world(group)[1]
    if size == 1:
        return [obj]
    out: list[Any] = [None] * size
    dist.all_gather_object(out, obj, group)
    return out


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under directory (the one `latest` names), or None. Any process
    may call it; it reads only the directory.

    >>> import tempfile
    >>> from tg import Tensor
    >>> import tg.distributed as dist
    >>> with tempfile.TemporaryDirectory() as run:
    ...     print(dist.latest_checkpoint(run))
    ...     _ = dist.save_checkpoint(run, 100, {"w": Tensor([1.0, 2.0])})
    ...     print(dist.latest_checkpoint(run).name)
    None
    step-00000100
    """
    root = Path(directory)
    try:
        name = (root / "latest").read_text().strip()
    except FileNotFoundError:
        return None
    if not name:
        raise FileNotFoundError(
            f"[distributed] {root / 'latest'} is empty: a save of an existing step was cut "
            f"short. The previous copy is {root}/step-*.replaced. Fix: rename it back to "
            f"its step-* name and write that name into {root / 'latest'}"
        )
    path = root / name
    if not (path / "meta.json").is_file():
        raise FileNotFoundError(
            f"[distributed] {root / 'latest'} names {name}, but {path / 'meta.json'} is missing "
            f"(the folder was changed outside tg). Fix: point 'latest' at a complete step-* "
            f"directory (one with meta.json), or delete {root} to start over"
        )
    return path


def _complete(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and (path / "meta.json").is_file()


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()           # a link, never what it points to
    else:
        shutil.rmtree(path)


def remove_leftovers(directory: str | os.PathLike) -> list[Path]:
    """Remove what saves cut short by a crash left in `directory` and return it: every `step-N.partial`
    (a save that never finished), and every `step-N.replaced` (the old copy of a step saved again) once
    `latest` names a complete checkpoint and `step-N` itself is complete. Call it only when no save
    into the directory is in progress; save_checkpoint and load_checkpoint do, on rank 0, once per
    process and directory.

        >>> remove_leftovers("/nonexistent/ckpt")
        []
    """
    root = Path(directory)
    try:
        latest = (root / "latest").read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        latest = ""
    latest_ok = bool(latest) and _complete(root / latest)
    now = f"`latest` names {latest}" if latest_ok else "there is no complete checkpoint yet"
    removed = []
    for path in sorted(root.glob("step-*.partial")) + sorted(root.glob("step-*.replaced")):
        if path.suffix == ".partial":
            why = (
                f"a save of step {path.name[5:-8].lstrip('0') or '0'} that never finished (the job stopped "
                f"mid-save); {now}"
            )
        elif latest_ok and _complete(path.with_suffix("")):
            why = f"the old copy of {path.with_suffix('').name}, which was saved again completely; {now}"
        else:
            continue      # maybe the only copy of its step: latest_checkpoint says how to restore it
        try:
            _remove(path)
        except OSError as e:
            log.warning(
                "[distributed] checkpoint: could not remove %s, %s: %s; remove it by hand", path, why, e
            )
            continue
        log.warning("[distributed] checkpoint: removed %s: %s", path, why)
        removed.append(path)
    return removed


def _tidy_once(root: Path) -> None:
    """Remove an earlier run's leftovers the first time this process (rank 0) touches `root`."""
    key = root.resolve()
    if key not in _tidied:
        _tidied.add(key)
        remove_leftovers(root)


def save_checkpoint(directory: str | os.PathLike, step: int, model: Any, optimizer: Any = None,
                    extra: dict | None = None, keep: int = 2, group: Any = None) -> Path:
    """Save model, optimizer (sharded when it is a ZeroOptimizer), every rank's RNG state and a
    JSON-able `extra` (sampler position, history, config) as checkpoint `step`. Keeps the newest
    `keep` checkpoints. Returns the checkpoint's directory. Every rank calls it (without a process
    group, the process is the only rank); `model` is a model, a DistributedDataParallel or a dict of
    tensors. torch's nearest is torch.distributed.checkpoint.save.

    >>> import tempfile
    >>> from tg import Tensor, nn
    >>> import tg.distributed as dist
    >>> model = nn.Linear(3, 1)
    >>> opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
    >>> with tempfile.TemporaryDirectory() as run:
    ...     path = dist.save_checkpoint(run, 100, model, opt, extra={"epoch": 2})
    ...     sorted(p.name for p in path.iterdir())
    ['meta.json', 'model.safetensors', 'optim.safetensors']
    """
    from tg.distributed.zero import ZeroOptimizer
    rank, size = _world(group)
    root = Path(directory)
    final = root / f"step-{int(step):08d}"
    partial = root / f"step-{int(step):08d}.partial"
    if rank == 0:
        _tidy_once(root)            # before this run's first .partial exists
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
    _barrier(group)
    files = ["model.safetensors"]
    units = fsdp.units_of(_unwrap(model))
    if units:          # FSDP: the whole model gathered unit by unit (every rank takes part)
        fsdp.save_full(_unwrap(model), partial / "model.safetensors", rank, metadata={"step": str(step)})
    elif rank == 0:
        safe_save(get_state_dict(_unwrap(model)), partial / "model.safetensors", metadata={"step": str(step)})
    if units and optimizer is not None:     # each rank the state rows of its shards, by parameter name
        files += [_shard_name(r, size) for r in range(size)]
        state, meta = fsdp.optimizer_shard(_unwrap(model), optimizer)
        safe_save(state, partial / _shard_name(rank, size), metadata={**meta, "rank": str(rank),
                                                                       "world_size": str(size)})
    elif isinstance(optimizer, ZeroOptimizer):
        files += [_shard_name(r, size) for r in range(size)]
        meta = {"index": json.dumps(optimizer.shard_index()), "rank": str(rank), "world_size": str(size),
                "params": json.dumps([list(p.shape) for p in optimizer.params])}
        safe_save(optimizer.shard_state_dict(), partial / _shard_name(rank, size), metadata=meta)
    elif optimizer is not None:
        files.append("optim.safetensors")
        if rank == 0:
            safe_save(optimizer.flat_state_dict(), partial / "optim.safetensors")
    rng = _gather_json(Tensor.get_rng_state(), group)
    _barrier(group)   # every rank's files are on disk
    if rank == 0:
        meta_json = {"format": FORMAT, "step": int(step), "world_size": size, "files": files, "rng": rng,
                     "extra": extra or {}}
        write_atomic(partial / "meta.json", json.dumps(meta_json).encode())
        _publish(root, partial, final, keep)
    _barrier(group)   # nobody returns before `latest` names the new checkpoint
    return final


def _publish(root: Path, partial: Path, final: Path, keep: int) -> None:
    """Make partial the checkpoint `final` and point `latest` at it; at every moment `latest` names a
    complete checkpoint. Then drop the older ones beyond `keep` and saves that were cut short."""
    replaced = None
    if final.exists():     # saving a step again: the old copy stays complete until `latest` moves
        replaced = final.with_name(final.name + ".replaced")
        shutil.rmtree(replaced, ignore_errors=True)
        if (root / "latest").is_file() and (root / "latest").read_text().strip() == final.name:
            write_atomic(root / "latest", b"")   # briefly no checkpoint rather than a missing one
        os.replace(final, replaced)
    os.replace(partial, final)
    write_atomic(root / "latest", final.name.encode())
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)
    for stray in root.glob("step-*.partial"):
        shutil.rmtree(stray, ignore_errors=True)
    # older steps than this one, newest first; a later step left by another run is not touched
    older = sorted((p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit()
                    and int(p.name[5:]) < int(final.name[5:])), key=lambda p: int(p.name[5:]))
    for old in older[:max(0, len(older) - (keep - 1))] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def _shard_name(rank: int, size: int) -> str:
    return f"optim-{rank:05d}-of-{size:05d}.safetensors"


def load_checkpoint(directory: str | os.PathLike, model: Any, optimizer: Any = None, group: Any = None,
                    restore_rng: bool = True) -> dict | None:
    """Load the newest checkpoint under directory into model and optimizer (any world size for a
    ZeroOptimizer) and restore this rank's RNG state. Returns meta.json ({"step", "world_size",
    "extra", ...}), or None when there is no checkpoint yet. Every rank calls it. torch's nearest is
    torch.distributed.checkpoint.load.

    >>> import tempfile
    >>> from tg import Tensor
    >>> import tg.distributed as dist
    >>> with tempfile.TemporaryDirectory() as run:
    ...     print(dist.load_checkpoint(run, {"w": Tensor([0.0, 0.0])}))     # nothing saved yet
    ...     _ = dist.save_checkpoint(run, 100, {"w": Tensor([1.0, 2.0])}, extra={"epoch": 2})
    ...     w = Tensor([0.0, 0.0])
    ...     meta = dist.load_checkpoint(run, {"w": w})
    None
    >>> meta["step"], meta["extra"], w.tolist()
    (100, {'epoch': 2}, [1.0, 2.0])
    """
    rank, size = _world(group)
    if rank == 0:
        _tidy_once(Path(directory))    # every rank is loading, so no save of this job is under way
    path = latest_checkpoint(directory)
    if path is None:
        return None
    meta = json.loads((path / "meta.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"[distributed] {path}: format {meta.get('format')!r}, expected {FORMAT!r}. Fix: load it "
            f"with the tg version that wrote it, or start from a new checkpoint directory"
        )
    units = fsdp.units_of(_unwrap(model))
    if units:          # FSDP: this rank's rows of each parameter, at any world size
        fsdp.load_full(_unwrap(model), path / "model.safetensors")
    else:
        load_state_dict(_unwrap(model), safe_load(path / "model.safetensors"))
    _load_optimizer(path, meta, _unwrap(model), optimizer, bool(units))
    rng = meta.get("rng") or []
    if restore_rng and rng:
        Tensor.set_rng_state(rng[rank % len(rng)])
    return meta


def _load_optimizer(path: Path, meta: dict, model: Any, optimizer: Any, fsdp_model: bool) -> None:
    """The optimizer's state from checkpoint path: an FSDP model's or a ZeroOptimizer's shards (saved at
    any world size), or a plain optimizer's whole state."""
    from tg.distributed.zero import ZeroOptimizer
    if fsdp_model and optimizer is not None:
        shards = sorted(str(path / f) for f in meta["files"] if f.startswith("optim-"))
        if not shards:
            raise ValueError(f"[distributed] {path} holds no optimizer shards (saved without FSDP); load it "
                             f"into the model it was saved with")
        fsdp.load_optimizer_shards(model, optimizer, shards)
    elif isinstance(optimizer, ZeroOptimizer):
        shards = sorted(str(path / f) for f in meta["files"] if f.startswith("optim-"))
        if not shards:
            raise ValueError(
                f"[distributed] {path} holds no ZeroOptimizer shards (saved with a plain optimizer); "
                f"load it with the optimizer it was saved with"
            )
        load_zero_shards(optimizer, shards)
    elif optimizer is not None:
        if "optim.safetensors" not in meta["files"]:
            raise ValueError(
                f"[distributed] {path} holds ZeroOptimizer shards, not a plain optimizer's state; "
                f"load it into a ZeroOptimizer (any world size)"
            )
        optimizer.load_state_dict(safe_load(path / "optim.safetensors"))


def _saved_pieces(opt: Any, paths: list[str]) -> tuple[list[tuple[str, list[dict]]], dict]:
    """Each shard file's index, checked against opt's parameters, and where each parameter's elements
    live in the old shards: {param: [(first, length, file, part, offset)]}."""
    shapes = [list(p.shape) for p in opt.params]
    old: list[tuple[str, list[dict]]] = []
    for path in paths:
        meta = safe_load_metadata(path)
        saved_shapes = json.loads(meta["params"])
        if saved_shapes != shapes:
            raise ValueError(
                f"[distributed] {path} was saved for {len(saved_shapes)} parameters of shapes "
                f"{saved_shapes[:4]}..., this optimizer has {len(shapes)} of shapes {shapes[:4]}...; "
                f"the model changed since the checkpoint. Fix: build the model as it was when saved "
                f"(same layers, same parameter order), or start from a new checkpoint directory"
            )
        old.append((path, json.loads(meta["index"])))
    # where each parameter's elements live in the old shards: (first, length, file, part, offset)
    by_param: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for f, (_, index) in enumerate(old):
        for part in index:
            for param, first, length, offset in part["pieces"]:
                by_param.setdefault(param, []).append((first, length, f, part["part"], offset))
    return old, by_param


# Complexity: a loop over saved pieces with one check per way an old shard can disagree with the new layout.
def load_zero_shards(opt: Any, paths: list[str]) -> None:  # noqa: C901
    """Fill opt's shard (any world size) from shard files saved at any world size."""
    old, by_param = _saved_pieces(opt, paths)
    loaded: dict[int, dict[str, Tensor]] = {}

    def tensors_of(f: int) -> dict[str, Tensor]:
        if f not in loaded:
            loaded[f] = safe_load(old[f][0], device=opt.device)
        return loaded[f]
    state = opt.shard_state_dict()
    keys = sorted({k.split(".", 2)[2] for k in state if k.startswith("state.")})
    targets = {key: [np.zeros(m.numel(), np.float64) for m in opt.masters] for key in [*keys, "master"]}
    host: dict[tuple[int, str, int], np.ndarray] = {}
    for b, part in enumerate(opt.shard_index()):
        for param, first, length, offset in part["pieces"]:
            for ofirst, olength, f, opart, ooffset in by_param.get(param, []):
                lo, hi = max(first, ofirst), min(first + length, ofirst + olength)
                if lo >= hi:
                    continue
                for key in targets:
                    name = f"master.{opart}" if key == "master" else f"state.{opart}.{key}"
                    if (f, name, opart) not in host:
                        host[(f, name, opart)] = tensors_of(f)[name].numpy().astype(np.float64)
                    src = host[(f, name, opart)]
                    targets[key][b][offset + lo - first:offset + hi - first] = src[ooffset + lo - ofirst:
                                                                                   ooffset + hi - ofirst]
    scalars = tensors_of(0)
    groups_here = sum(1 for k in state if k == "lr" or k.startswith("lr."))
    groups_saved = sum(1 for k in scalars if k == "lr" or k.startswith("lr."))
    if groups_here != groups_saved:
        raise ValueError(f"[distributed] load_checkpoint: the optimizer's shards were saved with "
                         f"{groups_saved} parameter group(s), this ZeroOptimizer has {groups_here}; fix: "
                         f"make the optimizer with the same groups (add_param_group before loading)")
    new: dict[str, Any] = {k: scalars[k] for k in state if k == "t" or k == "lr" or k.startswith("lr.")}
    for b, m in enumerate(opt.masters):
        new[f"master.{b}"] = targets["master"][b].astype(m.dtype.np)
        for key in keys:
            new[f"state.{b}.{key}"] = targets[key][b].astype(state[f"state.{b}.{key}"].dtype.np)
    opt.load_state_dict(new)
