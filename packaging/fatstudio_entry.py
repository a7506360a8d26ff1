"""The bundle's entry point (packaging/fatstudio.spec): the same command line as ``fatstudio``."""
import multiprocessing
import sys

from fatstudio.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a frozen child process must not start the app again
    sys.exit(main())
