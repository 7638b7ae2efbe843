# A torch script as its user wrote it: the import order and line lengths are the script's, not tg's style.
# ruff: noqa: E501, I001
"""The dataset of the DDP tutorial script (its datautils.py): random (x, y) pairs, here with y a fixed
linear function of x plus a little noise, so the regression loss can fall."""
import tg as torch                    # import torch
from tg.utils.data import Dataset     # from torch.utils.data import Dataset
# --- end of imports: nothing below names the framework except through these names


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        g = torch.Generator().manual_seed(0)
        w = torch.randn(20, 1, generator=g)
        self.data = []
        for _ in range(size):
            x = torch.rand(20, generator=g)
            y = (x @ w) + 0.01 * torch.randn(1, generator=g)
            self.data.append((x, y))

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]
