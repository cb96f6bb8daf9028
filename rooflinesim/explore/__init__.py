"""`rooflinesim explore`: a local web page over predict, sweep and serve; see server.py and docs/explore.md."""
