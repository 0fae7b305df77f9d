"""What a command does once its arguments are parsed: one training job (prepare, fit,
evaluate), its ranks when it runs on several processes, a sweep of jobs through Hydra's
launchers, the plan of an extension grid, and the checks that need torch or the data before
anything is created. The Typer commands in cli/ call these and print their results."""
