"""`python -m pycoop ...`: the same command line as the `pycoop` script."""
import sys

from .cli import main

sys.exit(main())
