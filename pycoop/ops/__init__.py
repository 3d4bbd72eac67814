"""Op families; importing this package registers every op in the registry."""
from . import composite, control, core, khr, pointer  # noqa: F401
from . import qcom  # noqa: F401,E402  (pycoop.qcom ops)
from . import intel  # noqa: F401,E402  (pycoop.intel ops)
from . import nv  # noqa: F401,E402  (pycoop.nv ops)
