"""`python -m cli` and the `vigil` command: the allocator is settled (vigil.allocator)
before the command line, which imports torch and OpenCV, is loaded."""

from __future__ import annotations

import sys


def main() -> int:
    from vigil.allocator import reexec_for

    reexec_for(sys.argv[1:])
    from cli.main import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
