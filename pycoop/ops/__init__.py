"""Op families; importing this package registers every op in the registry."""
from . import composite, control, core, khr  # noqa: F401
