"""tiny-llama: a small Llama the project trains itself, offline, from Python's own text."""
