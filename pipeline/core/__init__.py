"""What every stage shares: paths, errors, files, processes, the run directory, the stage runner."""
