"""Op families; importing this package registers every op in the registry."""
from . import atomic, composite, control, core, intel, khr, nv, pointer, qcom, spec, subgroup  # noqa: F401
