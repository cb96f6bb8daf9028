"""The torch reference implementations that calibration and validation run: the decoder, sampling and the exact
acceptance rule, Hugging Face checkpoints, trained acceptance models and the serving loop. The module map is in
`rooflinesim.calibrate`."""
