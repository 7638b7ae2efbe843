"""torch.distributed.optim's surface: ZeroRedundancyOptimizer (ZeRO stage 1) on tg's ZeroOptimizer.

    from tg.nn.parallel import DistributedDataParallel as DDP
    from tg.distributed.optim import ZeroRedundancyOptimizer
    model = DDP(model, device_ids=[local_rank])
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=nn.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step()           # DDP averaged .grad; each rank steps its part, then all-gather
    opt.consolidate_state_dict(to=0)
    if rank == 0: tg.save(opt.state_dict(), "optim.safetensors")   # every parameter's state

Stage 1 as in torch: the full gradients stay in `.grad` until `zero_grad()` (so clipping them between
backward and step works) and only the optimizer state is split. What tg adds: without a DDP wrapper
(or when it did not average these gradients) `step()` averages them itself (reduce-scatter, mean),
so the result is the same either way; gradients DDP has averaged are never reduced twice.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tg.core.tensor import Tensor
from tg.distributed.zero import ZeroOptimizer
from tg.nn.optim import Optimizer
from tg.utils.warn import warn_once


class ZeroRedundancyOptimizer(ZeroOptimizer):
    """torch.distributed.optim.ZeroRedundancyOptimizer: `optimizer_class`'s state split across the
    ranks (ZeRO-1); `**defaults` go to optimizer_class. `process_group` as in torch (None: the
    default group). `parameters_as_bucket_view` and `overlap_with_ddp` are accepted: tg always packs
    parameters into flat buckets, and steps after backward (a warning says so once when set).

    `state_dict()` is this rank's shard (what tg.distributed.save_checkpoint saves and reshards),
    except on rank `to` after `consolidate_state_dict(to)` and until the next step: there it is the
    whole state, in the form `optimizer_class(params).state_dict()` has (so call save_checkpoint
    before consolidating or after the next step). `load_state_dict` takes either form (the whole one
    on every rank, after the model's weights are loaded).

    >>> from tg import Tensor, nn
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> model = dist.DistributedDataParallel(nn.Linear(3, 1))
    >>> opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=nn.optim.AdamW, lr=0.1)
    >>> _ = model(Tensor.ones(4, 3)).sum().backward()
    >>> opt.step()
    >>> opt.consolidate_state_dict(to=0)
    >>> whole = opt.state_dict()
    >>> list(whole["state"]), list(whole["state"][0]), whole["param_groups"][0]["params"]
    ([0, 1], ['exp_avg', 'exp_avg_sq', 'step'], [0, 1])
    >>> dist.destroy_process_group()
    """

    stage = 1

    def __init__(self, params: Iterable[Tensor], optimizer_class: type[Optimizer], process_group: Any = None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False, **defaults: Any):
        if parameters_as_bucket_view:
            warn_once("zero-bucket-view", "[distributed] ZeroRedundancyOptimizer: parameters_as_bucket_view "
                      "is accepted and has no effect: tg always packs the parameters into flat buckets")
        if overlap_with_ddp:
            warn_once("zero-overlap", "[distributed] ZeroRedundancyOptimizer: overlap_with_ddp is accepted "
                      "and has no effect: tg steps in step(), after DDP's all-reduce (no comm hook needed)")
        super().__init__(params, optimizer_class, group=process_group, **defaults)
        self.optimizer_class, self.defaults = optimizer_class, dict(defaults)
        self.optim = self.optimizer            # torch's name for the local optimizer
        self._consolidated: dict[str, Any] | None = None

    def step(self) -> None:
        self._consolidated = None
        super().step()

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's part of the optimizer state onto rank `to` (every rank calls it);
        there, `state_dict()` then returns the whole state until the next step."""
        if not 0 <= to < self.world_size:
            raise ValueError(f"[distributed] consolidate_state_dict: to must be a rank of the group, "
                             f"0..{self.world_size - 1}, got {to}")
        full: dict[int, dict[str, np.ndarray]] = {i: {} for i in range(len(self.params))}
        for b, bucket in enumerate(self.buckets):
            part = self._part(bucket)
            for key, value in self.optimizer.state_of(b).items():
                mine = value.numpy().reshape(-1)
                if mine.size != part.stop - part.start:
                    raise ValueError(f"[distributed] consolidate_state_dict: "
                                     f"{self.optimizer_class.__name__}'s state {key!r} has {mine.size} "
                                     f"elements, expected one per shard element ({part.stop - part.start}); "
                                     f"only per-element state can be gathered")
                whole = np.empty(bucket.padded, mine.dtype)
                self._collective("all_gather", whole, np.ascontiguousarray(mine)).wait()
                for p, off, n in zip(bucket.params, bucket.offsets, bucket.sizes):
                    full[self.position[id(p)]][key] = whole[off:off + n].reshape(p.shape)
        if self.rank != to:
            self._consolidated = None
            return
        state = {i: {**{k: Tensor(v, device=self.device) for k, v in part.items()}, "step": self.optimizer.t}
                 for i, part in full.items()}
        groups = [{**g, "params": [self.position[id(p)] for p in ps]}
                  for g, ps in zip(self.optimizer.state_dict()["param_groups"], self.group_params)]
        self._consolidated = {"state": state, "param_groups": groups}

    def state_dict(self) -> dict[str, Any]:
        """The whole state on rank `to` after consolidate_state_dict(to) (until the next step), else
        this rank's shard."""
        return self._consolidated if self._consolidated is not None else self.shard_state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load this rank's shard (what shard_state_dict() gave at the same world size) or the whole
        state (what state_dict() gave after consolidate_state_dict, or a plain optimizer's): each
        rank keeps its part. Load the model's weights first: the shard's masters are taken from them."""
        self._consolidated = None
        if "master.0" in state_dict:
            super().load_state_dict(state_dict)
            return
        # parses every form, strictly (the groups as given, their options from the state)
        whole = self.optimizer_class([{"params": ps} for ps in self.group_params], **self.defaults)
        whole.load_state_dict(state_dict)
        for b, part in enumerate(self.shard_index()):
            state = self.optimizer.state_of(b)
            for key, value in state.items():
                buf = np.zeros(part["size"], value.dtype.np)
                for param, first, length, offset in part["pieces"]:
                    source = whole.state_of(param)[key].numpy().reshape(-1)
                    buf[offset:offset + length] = source[first:first + length]
                value.assign(Tensor(buf, dtype=value.dtype, device=value.device)).realize()
            master, bucket = self.masters[b], self.buckets[b]
            own = self._pack_params(bucket)[self._part(bucket)].astype(master.dtype.np)
            master.assign(Tensor(own, dtype=master.dtype, device=master.device)).realize()
        self.optimizer.t.assign(whole.t).realize()
        for mine, theirs in zip(self.optimizer.param_groups, whole.param_groups):
            mine.update({k: v for k, v in theirs.items() if k != "params"})
