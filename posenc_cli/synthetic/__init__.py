"""Synthetic length-generalization tasks (config group ``task``): generators, batches, scoring."""
