"""The `edgespec` command."""
