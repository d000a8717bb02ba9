"""The `vigil` command line."""
