"""Text for calibration and evaluation: the offline corpus, local files, hub data sets."""
