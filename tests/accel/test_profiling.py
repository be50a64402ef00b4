"""Op and kernel counting on callables whose work is known by hand."""

from __future__ import annotations

import pytest
import torch

from embodirl.accel.profiling import compile_stats, count_kernels, count_ops, inductor_kernel_events


def scaled_sum(x: torch.Tensor) -> torch.Tensor:
    # Eager: mul (x * 2), add (+ 1), view (no kernel), sum -> 4 ops, 3 of them kernels.
    # Inductor: the elementwise mul and add fuse into the sum's reduction loop -> 1 kernel.
    return (x * 2 + 1).view(-1).sum()


def test_count_ops_separates_views_from_kernels():
    count = count_ops(scaled_sum, torch.ones(4, 3))
    assert count.ops == {"aten.mul.Tensor": 1, "aten.add.Tensor": 1, "aten.view.default": 1, "aten.sum.default": 1}
    assert (count.total, count.views, count.compute) == (4, 1, 3)
    # x.t() is a view; .contiguous() copies (clone); torch.zeros allocates and fills in one op; then add.
    count = count_ops(lambda x: x.t().contiguous() + torch.zeros(3, 4), torch.ones(4, 3))
    assert count.compute == 3 and count.views == 1, count.ops


@pytest.mark.slow  # torch.profiler imports torch._dynamo, which no other fast test in the process needs
def test_count_kernels_of_eager_code():
    x = torch.ones(16, 8)
    assert count_kernels(scaled_sum, x) == 3  # top-level ops only: the view and the ops inside ops not counted


@pytest.mark.slow  # two inductor compiles
def test_count_kernels_of_compiled_code():
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    x = torch.ones(16, 8)
    torch._dynamo.reset()
    try:
        stats = compile_stats(scaled_sum, x)
        assert stats.kernels == 1 and stats.compile_s > 0
        torch._dynamo.reset()  # compile again, with profiler events
        with inductor_kernel_events():
            compiled = torch.compile(scaled_sum, fullgraph=True)
            assert compiled(x).item() == 16 * 8 * 3
        assert count_kernels(compiled, x) == 1
    finally:
        torch._dynamo.reset()
