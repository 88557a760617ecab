"""``python -m pipeline`` is the ``tunetable`` command."""

from pipeline.cli import main

if __name__ == "__main__":
    main()
