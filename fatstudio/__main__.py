"""``python -m fatstudio …`` is the same as the ``fatstudio`` command."""
import sys

from .cli import main

sys.exit(main())
