"""Op families; importing this package registers every op in the registry (ir.registry),
installs the operators of traced values (values) and checks that every op record is complete."""
from ..ir.registry import check_complete
from . import (atomic, composite, control, core, dot, intel, khr, long_vector,  # noqa: F401
               nv, pointer, qcom, spec, subgroup)
from . import values  # noqa: F401  (after the families: it dispatches to them)

check_complete()
