"""Torch measurement on the local device: backends, timers, the microbenchmarks, the speed probe, the machine-speed
anchors, `calibrate` itself and `acceptance measure`. The module map is in `rooflinesim.calibrate`."""
