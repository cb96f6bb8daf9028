"""Measured runs against the model's predictions: `validate`, its hold-out family and report, `validate --serve` and
`acceptance validate`. The module map is in `rooflinesim.calibrate`."""
