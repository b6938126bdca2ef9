"""`python -m dsl` is `dslrun`."""

from dsl.cli import main

main(prog_name="dslrun")
