"""Planning, fitting and merging calibration runs: importable without torch (numpy, scipy and pydantic only).
The module map is in `rooflinesim.calibrate`."""
