import sys

from . import main

if __name__ == "__main__":  # guarded: importing every module (nox -s isolation) must not run the CLI
    sys.exit(main())
