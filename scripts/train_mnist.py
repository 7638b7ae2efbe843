"""Train a small CNN on MNIST-format IDX files with tg.

The folder must hold the standard files (plain or .gz): train-images-idx3-ubyte,
train-labels-idx1-ubyte and, for a test accuracy, t10k-images-idx3-ubyte and
t10k-labels-idx1-ubyte. Nothing is downloaded.

    python scripts/train_mnist.py path/to/mnist --epochs 1
"""
from __future__ import annotations

import argparse
import gzip
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tg  # noqa: E402
from tg import Tensor, TinyJit, nn  # noqa: E402
from tg.nn import functional as F  # noqa: E402
from tg.nn.state import get_parameters  # noqa: E402

IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format: magic 0x0000TTNN, NN big-endian dims, then the data)."""
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_TYPES:
        raise ValueError(f"[mnist] {path} is not an IDX file (bad magic {raw[:4].hex()}); expected 0000TTNN")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    dtype = np.dtype(IDX_TYPES[raw[2]])
    count = int(np.prod(dims))
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=4 + 4 * ndim) if \
        len(raw) >= 4 + 4 * ndim + count * dtype.itemsize else None
    if data is None:
        raise ValueError(f"[mnist] {path} is truncated: the header says {dims} of {dtype}")
    return data.reshape(dims)


def find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).exists():
            return folder / name
    return None


def load_split(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray] | None:
    images, labels = find(folder, f"{prefix}-images-idx3-ubyte"), find(folder, f"{prefix}-labels-idx1-ubyte")
    if images is None or labels is None:
        return None
    x, y = read_idx(images), read_idx(labels)
    if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
        raise ValueError(f"[mnist] {images.name} {x.shape} and {labels.name} {y.shape} do not pair up; "
                         f"expected (N, H, W) images and (N,) labels")
    return (x.astype(np.float32) / 255.0 - 0.1307) / 0.3081, y.astype(np.int32)


class CNN:
    """conv 1->32 3x3, conv 32->64 3x3, max-pool 2, linear -> 10 (the bench_train model)."""

    def __init__(self, size: int = 28, classes: int = 10):
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        side = (size - 4) // 2
        self.fc = nn.Linear(64 * side * side, classes)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.c2(self.c1(x).relu()).relu().max_pool2d(2)          # (N, 64, side, side)
        return self.fc(x.flatten(1))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training images")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    train = load_split(args.folder, "train")
    if train is None:
        raise FileNotFoundError(
            f"[mnist] no train-images-idx3-ubyte / train-labels-idx1-ubyte in {args.folder}"
        )
    x_train, y_train = train
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    test = load_split(args.folder, "t10k")
    Tensor.manual_seed(args.seed)
    size = x_train.shape[1]
    model = CNN(size, int(max(y_train.max(), test[1].max() if test else 0)) + 1)
    opt = nn.optim.Adam(get_parameters(model), lr=args.lr)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.realize()

    rng = np.random.default_rng(args.seed)
    losses: list[float] = []
    steps = max(len(x_train) // args.batch, 1)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        for i in range(steps):
            idx = order[i * args.batch:(i + 1) * args.batch]
            if len(idx) < args.batch:
                idx = order[:args.batch]
            loss = train_step(Tensor(x_train[idx][:, None]), Tensor(y_train[idx])).item()
            losses.append(loss)
            if i % 50 == 0 or i == steps - 1:
                rate = len(losses) / (time.perf_counter() - start)
                print(f"epoch {epoch} step {i + 1}/{steps}  loss {loss:.4f}  {rate:.1f} steps/s", flush=True)
    result: dict = {"losses": losses}
    if test is not None:
        x_test, y_test = test
        correct = 0
        with tg.no_grad():
            for i in range(0, len(x_test), 1000):
                pred = model(Tensor(x_test[i:i + 1000][:, None])).argmax(-1).numpy()
                correct += int((pred == y_test[i:i + 1000]).sum())
        result["test_accuracy"] = correct / len(x_test)
        print(f"test accuracy {result['test_accuracy']:.4f} on {len(x_test)} images")
    return result


if __name__ == "__main__":
    main()
