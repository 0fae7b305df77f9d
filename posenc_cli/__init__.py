"""posenc: train small decoder LMs with different positional encodings and compare them."""

__version__ = "0.1.0"
