"""Interchange with CS336 assignment-1 code: import a student's checkpoint and BPE tokenizer
as a posenc run, export a posenc RoPE run in the same formats."""
