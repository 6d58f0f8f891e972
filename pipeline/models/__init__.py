"""Which model a name means (aliases, hub ids, local folders, tiny-llama) and its architecture."""
