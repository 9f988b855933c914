"""``python -m fuzz.bench`` (inside the repository): :mod:`parityfuzz.frontends.bench`."""

import sys

from parityfuzz.frontends.bench import main

if __name__ == "__main__":
    sys.exit(main())
