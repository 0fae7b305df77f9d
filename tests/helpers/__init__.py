"""Code the tests share that needs no pytest fixture: importable as ``tests.helpers.<module>``
(pyproject's ``pythonpath = ["."]``), as in the lightning-hydra-template. Fixtures (conftest.py)
remain for what has a lifecycle: temporary folders, caches, trained runs."""
