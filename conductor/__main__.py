"""`python -m conductor` is the `conductor` command."""

from .cli import main

main()
