"""The ``tunetable`` subcommands, one module each, loaded on demand by ``tunetable.cli``."""
