"""One evaluation task per module; evals.base.registry finds them by their ``name``."""
