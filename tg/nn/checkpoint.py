"""Activation checkpointing under tg.nn's name: `checkpoint` and `checkpoint_sequential` live next to the
autograd engine (tg/core/checkpoint.py: they make the graph nodes backward recomputes through);
torch's path, with torch's arguments, is tg.utils.checkpoint."""
from tg.core.checkpoint import checkpoint, checkpoint_sequential

__all__ = ["checkpoint", "checkpoint_sequential"]
