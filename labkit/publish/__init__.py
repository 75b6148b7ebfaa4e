"""Figures and tables of the lab's executed notebooks, for slides and reports.

  export.py    `labkit export`: every figure and results table into one folder
  images.py    static images (PNG, SVG, PDF) through one long-lived kaleido Chromium

Importing this package imports nothing.
"""
