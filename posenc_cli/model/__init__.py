"""The CS336 assignment-1 decoder with a pluggable positional encoding."""

from posenc_cli.model.transformer import TransformerLM, build_model

__all__ = ["TransformerLM", "build_model"]
