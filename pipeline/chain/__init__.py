"""The chain: quantize → eval → serve as one flow (flow.py) and its offline plan (plan.py)."""
