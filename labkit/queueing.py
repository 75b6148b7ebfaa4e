"""The old name of labkit.what_breaks, for notebooks and editions handed out before it was renamed:
importing this gives that very module."""

import sys

from labkit import what_breaks as _moved

sys.modules[__name__] = _moved
