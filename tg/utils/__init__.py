"""torch.utils's place in tg: `tg.utils.data` (datasets and loaders) and `tg.utils.checkpoint`
(activation checkpointing), so a ported script's imports keep their torch paths."""
