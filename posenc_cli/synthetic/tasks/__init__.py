"""One module per synthetic task (see synthetic/base.py)."""
