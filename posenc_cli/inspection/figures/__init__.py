"""One module per inspect figure (see inspection/base.py)."""
