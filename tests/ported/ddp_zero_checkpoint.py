# A torch script as its user wrote it: the import order and line lengths are the script's, not tg's style.
# ruff: noqa: E501, I001
"""DDP + activation checkpointing + ZeroRedundancyOptimizer, written from torch's docs: a residual MLP
whose blocks run through torch.utils.checkpoint.checkpoint, wrapped in DDP, stepped by ZeRO-1 AdamW,
the loss averaged over ranks for logging, the whole optimizer state gathered and saved on rank 0.
Run: tglaunch --nproc 2 ddp_zero_checkpoint.py"""
import os

import tg as torch                                                # import torch
import tg.nn as nn                                                # import torch.nn as nn
import tg.nn.functional as F                                      # import torch.nn.functional as F
import tg.distributed as dist                                     # import torch.distributed as dist
from tg.nn.parallel import DistributedDataParallel as DDP         # from torch.nn.parallel import DistributedDataParallel as DDP
from tg.distributed.optim import ZeroRedundancyOptimizer          # from torch.distributed.optim import ZeroRedundancyOptimizer
from tg.utils.checkpoint import checkpoint                        # from torch.utils.checkpoint import checkpoint
# --- end of imports: nothing below names the framework except through these names


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, dim=16, depth=3, classes=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        for block in self.blocks:
            # recompute each block's activations in backward instead of keeping them
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])

    torch.manual_seed(0)                   # the same initial weights everywhere (DDP broadcasts anyway)
    model = Net()
    ddp = DDP(model)
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-3,
                                        weight_decay=0.01)

    # each rank's own shard of a synthetic task: the class is the index of the largest of 4 features
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(64, 16, generator=g)
    y = x[:, :4].argmax(dim=1)

    losses = []
    for step in range(8):
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        optimizer.step()

        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        losses.append(logged.item())
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.4f} (mean over {world_size} ranks, local rank {local_rank})")

    optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        state = optimizer.state_dict()
        first = next(iter(model.parameters()))
        assert state["param_groups"][0]["lr"] == 3e-3 and state["state"][0]["exp_avg"].shape == first.shape
        print(f"saving {len(state['state'])} parameters' state at step {int(state['state'][0]['step'].item())}")
        torch.save(state, "optimizer.pt")
        torch.save(ddp.module.state_dict(), "model.pt")
        # the consolidated state is a whole AdamW state: a plain AdamW over the same parameters loads it
        plain = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        plain.load_state_dict(torch.load("optimizer.pt"))
        print("saved and reloaded the whole optimizer state")
    dist.barrier()

    print(f"[rank {rank}] first loss {losses[0]:.4f} last loss {losses[-1]:.4f}")
    assert losses[-1] < losses[0], losses
    dist.destroy_process_group()
    print(f"[rank {rank}] RESULT ok")


if __name__ == "__main__":
    main()
