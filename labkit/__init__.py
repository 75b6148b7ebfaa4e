"""labkit: the Python side of the concurrent-servers lab.

Notebooks stay thin; the logic lives here, where it is tested.  This module
imports nothing heavy, so `python3 -m labkit build` works before the lab's
virtual environment exists.
"""

__version__ = "0.1.0"
