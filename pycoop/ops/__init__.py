"""Op families; importing this package registers every op in the registry."""
from . import composite, control, core, intel, khr, nv, pointer, qcom, spec  # noqa: F401
