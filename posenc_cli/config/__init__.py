"""Configs: the schema, composing configs/ with overrides, parsing overrides, run directories."""
