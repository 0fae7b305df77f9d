"""Training: runtime choices, the one training step, the Trainer, checkpoints, the schedule."""
