# A torch script as its user wrote it: the import order and line lengths are the script's, not tg's style.
# ruff: noqa: E501, I001
"""The DDP tutorial script (multigpu_torchrun style): a Trainer over a DistributedSampler-fed
DataLoader, DDP-wrapped model, rank 0 saving a snapshot. Run: tglaunch --nproc 2 ddp_trainer.py"""
import argparse
import os
import sys

import tg as torch                                                 # import torch
import tg.nn.functional as F                                       # import torch.nn.functional as F
from tg.utils.data import DataLoader                               # from torch.utils.data import DataLoader
from tg.utils.data.distributed import DistributedSampler           # from torch.utils.data.distributed import DistributedSampler
from tg.nn.parallel import DistributedDataParallel as DDP          # from torch.nn.parallel import DistributedDataParallel as DDP
from tg.distributed import init_process_group, destroy_process_group  # from torch.distributed import init_process_group, destroy_process_group
import tg.distributed as dist                                      # import torch.distributed as dist
# --- end of imports: nothing below names the framework except through these names

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_datautils import MyTrainDataset  # noqa: E402


def ddp_setup():
    init_process_group(backend="gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.losses = []
        # on CPU torch scripts pass no device_ids
        self.model = DDP(self.model)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        total = 0.0
        for source, targets in self.train_data:
            total += self._run_batch(source, targets)
        return total / len(self.train_data)

    def _save_checkpoint(self, epoch):
        ckp = self.model.module.state_dict()
        PATH = "checkpoint.pt"
        torch.save(ckp, PATH)
        print(f"Epoch {epoch} | Training checkpoint saved at {PATH}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            epoch_loss = self._run_epoch(epoch)
            self.losses.append(epoch_loss)
            print(f"[GPU{self.global_rank}] epoch {epoch} loss {epoch_loss:.5f}")
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_checkpoint(epoch)


def load_train_objs():
    train_set = MyTrainDataset(256)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        pin_memory=True,
        shuffle=False,
        sampler=DistributedSampler(dataset)
    )


def main(save_every, total_epochs, batch_size):
    ddp_setup()
    torch.manual_seed(0)
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every)
    trainer.train(total_epochs)

    # both ranks hold the same weights after every step
    w = trainer.model.module.weight.detach().clone()
    w_max = w.clone()
    dist.all_reduce(w_max, op=dist.ReduceOp.MAX)
    assert (w_max - w).abs().max().item() == 0.0, "ranks diverged"
    if trainer.global_rank == 0:
        loaded = torch.load("checkpoint.pt")
        assert sorted(loaded) == ["bias", "weight"], sorted(loaded)
    losses = trainer.losses
    print(f"[GPU{trainer.global_rank}] first loss {losses[0]:.5f} last loss {losses[-1]:.5f}")
    assert losses[-1] < losses[0], losses
    destroy_process_group()
    print(f"[GPU{trainer.global_rank}] RESULT ok")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description='simple distributed training job')
    parser.add_argument('--total_epochs', default=4, type=int, help='Total epochs to train the model')
    parser.add_argument('--save_every', default=1, type=int, help='How often to save a snapshot')
    parser.add_argument('--batch_size', default=32, type=int, help='Input batch size on each device (default: 32)')
    args = parser.parse_args()

    main(args.save_every, args.total_epochs, args.batch_size)
