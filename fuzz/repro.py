"""``python -m fuzz.repro FILE.json`` (the command the design binds): :mod:`parityfuzz.frontends.repro`."""

import sys

from parityfuzz.frontends.repro import main

if __name__ == "__main__":
    sys.exit(main())
