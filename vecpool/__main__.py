"""Entry point of ``python -m vecpool``."""

from __future__ import annotations

import sys

from vecpool.cli import main

if __name__ == "__main__":
    sys.exit(main())
