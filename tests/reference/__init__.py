"""Naive reference formulas of the encodings whose logit bias depends on content: one module
per encoding, named as the encoding's own module (posenc_cli/encodings/<name>.py), each with
``content_bias(enc, q, k, pos_t, pos_s, layer, attn_input)``, the paper's definition written
the slow, obvious way that the fast paths are checked against. tests/conftest.py finds the
module by that name, so adding an encoding needs no list and no isinstance chain."""
