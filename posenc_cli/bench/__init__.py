"""`posenc bench` (suite, one process per case, tables) and the interleaved A/B script."""
