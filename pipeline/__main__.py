"""``python -m tunetable`` is the ``tunetable`` command."""

from tunetable.cli import main

if __name__ == "__main__":
    main()
