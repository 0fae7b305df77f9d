"""The CS336 assignment-1 decoder with a pluggable positional encoding."""

from posenc_cli.model.transformer import TransformerLM

__all__ = ["TransformerLM"]
