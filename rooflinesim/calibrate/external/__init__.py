"""Implementations the project did not write, and the user's own model: see `rooflinesim.calibrate`."""
