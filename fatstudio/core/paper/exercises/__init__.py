"""Exercises: write the paper's algorithms yourself, checked against the float64 reference (issue 37)."""
