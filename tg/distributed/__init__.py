"""tg.distributed: process groups, collectives and data-parallel training (see the distributed issues)."""
