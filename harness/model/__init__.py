"""The first-order analytical model of Chapter 9: pure functions in base units, no I/O."""
