"""Kernel AST -> loop nest -> optimised loop nest -> linear list of UOps (see linearizer.py)."""
