"""Performance bounds: prices, this host's measured rates, the roofline bound per step, and the
time estimates built on them (the GPU table: planning/gpus.py; `make advise`: pipeline/advise/)."""
