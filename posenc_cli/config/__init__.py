"""Configs: the schema, composing configs/ with overrides, parsing overrides, run directories."""

from posenc_cli.config.resolvers import register

register()
