"""KL-guided mixed-precision search (`make search MODEL=… TARGET_BITS=…`).

Each layer group (the Linears vLLM fuses: q/k/v, gate/up; o and down alone) is quantized alone
to each candidate format and scored by mean KL against the original on a small calibration-text
token set; a knapsack picks the per-group formats that minimise the summed KL within the average
bits budget (scales included); the choice is written as a non-uniform llm-compressor recipe,
quantized, evaluated, and compared — paired over the same held-out tokens — with the uniform
recipes that fit the budget and with a random per-group assignment under the same budget.
"""
