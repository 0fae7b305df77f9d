"""Leaf helpers every stage may use: the user-error type, atomic writes, the shared console."""
