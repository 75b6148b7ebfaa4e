"""The old name of labkit.exercises.checks, for notebooks and editions handed out before it moved:
importing this gives that very module."""

import sys

from labkit.exercises import checks as _moved

sys.modules[__name__] = _moved
