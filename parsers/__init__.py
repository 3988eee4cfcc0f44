"""Format parsers: pure functions from a file to its text units."""
