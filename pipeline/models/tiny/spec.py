"""tiny-llama's shape and training budget. Changing anything here rebuilds the cached model.

Shape rules: every Linear dimension a multiple of 128 (llm-compressor's group size 128 needs
input sizes divisible by 128; vLLM's CPU W4A16 kernel needs multiples of 32) and head size 64,
one that vLLM's CPU attention backend accepts. 5.2M parameters; 3.1M of them in decoder Linears.
"""

from typing import Any

CONFIG: dict[str, Any] = {  # its config.json: values of every JSON type
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

SPECIAL_TOKENS = ["<|pad|>", "<|begin_of_text|>", "<|end_of_text|>"]

# A minimal chat template so chat-style calibration and serving work on the tiny model too.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TRAINING = {
    "seed": 0,
    "steps": 170,
    "batch_size": 16,
    "seq_len": 128,
    "lr": 4e-3,
    "warmup_steps": 15,
    "weight_decay": 0.1,
    "threads": 2,  # fixed: float reductions depend on the thread count, and so would the weights
}
