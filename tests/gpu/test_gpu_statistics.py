"""gpu_statistics on a real GPU (run with -m gpu): the driver reports statistics for every
variant of a kernel, and a kernel holding a 128 x 128 f32 accumulator per workgroup reports
more of something (its registers) than a one-line fill."""
from __future__ import annotations

import pytest

import pycoop as pc
from pycoop import f32
from pycoop.kernels import gemm_nv

pytestmark = pytest.mark.gpu


@pc.kernel(workgroup_size=64)
def fill(y: pc.Buffer[f32]):
    y[pc.global_invocation_id.x] = 1.0


def test_the_driver_reports_each_variant_and_a_gemm_needs_more():
    from pycoop.runtime.vulkan import get_runtime
    if not get_runtime().capabilities.has("pipelineExecutableInfo"):
        pytest.skip("the device does not report pipeline statistics")
    small = {checked: fill.compile().gpu_statistics(checked=checked) for checked in (False, True)}
    big = gemm_nv(128, 128, 32, 256).compile().gpu_statistics(checked=False)
    for s in (*small.values(), big):
        print(s)
        assert s.values and all(isinstance(v, (bool, int, float)) for v in s.values.values())
    numbers = [n for n, v in big.values.items() if type(v) is int and n in small[False].values]
    assert any(big[n] > small[False][n] for n in numbers), (big, small[False])
