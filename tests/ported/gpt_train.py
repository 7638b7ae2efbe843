# A torch script as its user wrote it: the import order and line lengths are the script's, not tg's style.
# ruff: noqa: E501, I001
"""A short nanoGPT-style training loop for gpt_model.GPT on a tiny synthetic token stream (a repeating
pattern, so the loss can fall in a few steps): random batches with torch.randint, a warmup + cosine
learning rate set per step through optimizer.param_groups, gradient clipping, then sampling."""
import math
import os
import sys
import time

import tg as torch   # import torch
# --- end of imports: nothing below names the framework except through these names

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import GPT, GPTConfig  # noqa: E402

batch_size = 8
block_size = 16
max_iters = 12
learning_rate = 1e-2
min_lr = 1e-3
warmup_iters = 2
lr_decay_iters = 12
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
device = 'cpu'
device_type = 'cuda' if 'cuda' in device else 'cpu'

torch.manual_seed(1337)

# the "dataset": a token stream that steps through the vocabulary 7 at a time (next = (cur + 7) % 32)
vocab_size = 32
data = (torch.arange(2048) * 7) % vocab_size
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split):
    d = train_data if split == 'train' else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix.tolist()])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix.tolist()])
    return x.to(device), y.to(device)


def get_lr(it):
    if it < warmup_iters:                     # linear warmup
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # cosine from 1 to 0
    return min_lr + coeff * (learning_rate - min_lr)


model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=block_size, bias=False, vocab_size=vocab_size,
                  dropout=0.0)
model = GPT(GPTConfig(**model_args))
model.to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)


@torch.no_grad()
def estimate_loss(eval_iters=2):
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


losses = []
X, Y = get_batch('train')
t0 = time.time()
for iter_num in range(max_iters):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

    logits, loss = model(X, Y)
    X, Y = get_batch('train')  # prefetch the next batch
    loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

    lossf = loss.item()
    losses.append(lossf)
    if iter_num % 3 == 0:
        dt = time.time() - t0
        t0 = time.time()
        print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, time {dt * 1000:.0f}ms")

est = estimate_loss()
print(f"train loss {est['train'].item():.4f}, val loss {est['val'].item():.4f}")

context = torch.zeros((1, 1), dtype=torch.long, device=device)
sample = model.generate(context, max_new_tokens=4)
print("sample", sample[0].tolist())
assert sample.shape == (1, 5), sample.shape

print(f"first loss {losses[0]:.4f} last loss {losses[-1]:.4f}")
assert losses[-1] < losses[0], (losses[0], losses[-1])
print("RESULT ok")
