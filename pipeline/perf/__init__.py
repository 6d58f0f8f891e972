"""Performance bounds and cost: GPU specs, prices, the roofline bound per step, `make advise`."""
