"""Op families; importing this package registers every op in the registry (ir.registry),
installs the operators of traced values (values) and checks that every op record is complete."""
from ..ir.registry import check_complete
from . import atomic, composite, control, core, dot, intel, khr, nv, pointer, qcom, spec, subgroup  # noqa: F401
from . import values  # noqa: F401  (after the families: it dispatches to them)

check_complete()
