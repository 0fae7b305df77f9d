"""Evaluation tasks (plug-ins in evals/tasks/), their runner, and `posenc eval RUN_DIR`."""
