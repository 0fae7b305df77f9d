"""`python -m posenc_cli ...` runs the command line."""

from posenc_cli.cli.app import main

main()
