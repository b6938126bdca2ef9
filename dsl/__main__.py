"""`python -m dsl` is `dslrun`."""

from dsl.cli import main

if __name__ == "__main__":  # not when a worker process imports it (multiprocessing)
    main(prog_name="dslrun")
