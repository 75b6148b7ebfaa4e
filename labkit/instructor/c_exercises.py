"""The old name of labkit.exercises.c_exercises, for notebooks and editions handed out before it moved:
importing this gives that very module."""

import sys

from labkit.exercises import c_exercises as _moved

sys.modules[__name__] = _moved
