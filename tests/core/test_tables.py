"""Every primitive op has an entry in every per-op table."""
from tg.core.codegen.renderer import RENDER_TEMPLATES
from tg.core.function import FUNCTIONS
from tg.core.ops import ALL_OPS, ALU_OPS, ReduceOps
from tg.core.runtime.ops_numpy import REFERENCE


def test_reference_covers_every_op():
    assert [op for op in ALL_OPS if op not in REFERENCE] == []


def test_gradient_table_covers_every_op():
    assert [op for op in ALL_OPS if op not in FUNCTIONS] == []


def test_render_templates_cover_every_computing_op():
    # movement ops render as index expressions and buffer ops as loads/stores, not templates
    assert [op for op in [*ALU_OPS, *ReduceOps] if op not in RENDER_TEMPLATES] == []
