"""The old name of labkit.stubs.catalog, for notebooks and editions handed out before it moved:
importing this gives that very module."""

import sys

from labkit.stubs import catalog as _moved

sys.modules[__name__] = _moved
