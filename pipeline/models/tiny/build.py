"""Train tiny-llama: tokenizer, then a short causal-LM run, deterministic on CPU.

Cost: 170 steps × 16 sequences × 128 tokens ≈ 0.35M training tokens, about 2.5 minutes on 2 cores.
The result is cached under $PIPELINE_CACHE (default ./.cache) by a key over everything that
shapes the weights: spec, corpus, and library versions.
"""

import json
import math
import time
from pathlib import Path

from pipeline.core import own_process, progress
from pipeline.core.files import sha256_json, staging_dir, waiting_lock
from pipeline.core.paths import cache_root
from pipeline.data import corpus
from pipeline.models.tiny import spec

_BUILD_VERSION = 1  # bump when this file changes what it produces


def build_key() -> str:
    from importlib.metadata import version  # not the modules: seconds of imports per command

    return sha256_json(
        {
            "build": _BUILD_VERSION,
            "config": spec.CONFIG,
            "training": spec.TRAINING,
            "special": spec.SPECIAL_TOKENS,
            "chat": spec.CHAT_TEMPLATE,
            "corpus": corpus.fingerprint()["train"]["sha256"],
            "versions": [version("torch"), version("transformers"), version("tokenizers")],
        }
    )[:16]


def cached_path(root: Path | None = None) -> Path:
    """Where the default build is, built or not yet (what a dry run names)."""
    return (root or cache_root()) / f"tiny-llama-{build_key()}"


def ensure(training: dict | None = None, root: Path | None = None, measure: bool = True) -> Path:
    """Path of the built model, building it first if the cache lacks it. measure=False leaves
    out the held-out perplexities (most of a short build's time: bf16 matmuls on CPU)."""
    training = {**spec.TRAINING, **(training or {})}
    if training == spec.TRAINING and measure:
        key = build_key()
    else:
        key = sha256_json([build_key(), training, measure])[:16]
    root = root or cache_root()
    final = root / f"tiny-llama-{key}"
    with waiting_lock(root / "tiny-llama.lock"):
        if not (final / "build.json").is_file():
            print(f"building tiny-llama (once, cached at {final})", flush=True)
            with staging_dir(final) as tmp:
                own_process.spawned(_build, tmp, training, key, measure, what="building tiny-llama")
    return final


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.CONFIG["vocab_size"],
        min_frequency=2,
        special_tokens=spec.SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos = spec.SPECIAL_TOKENS[1]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=spec.SPECIAL_TOKENS[0],
        bos_token=bos,
        eos_token=spec.SPECIAL_TOKENS[2],
        chat_template=spec.CHAT_TEMPLATE,
        model_max_length=spec.CONFIG["max_position_embeddings"],
    )


def _token_stream(tokenizer, texts: list[str]):
    import torch

    ids: list[int] = []
    for doc in tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]:
        ids.extend(doc)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def heldout_perplexity(model, tokenizer, window: int = 256) -> float:
    """Perplexity over non-overlapping windows of the held-out split."""
    import torch

    stream = _token_stream(tokenizer, corpus.read_split("heldout"))
    n = (len(stream) // window) * window
    nll, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for batch in stream[:n].view(-1, window).split(16):
            out = model(input_ids=batch, labels=batch)
            nll += out.loss.item() * batch.numel()
            count += batch.numel()
    return math.exp(nll / count)


def _build(out: Path, training: dict, key: str, measure: bool) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    started = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(training["threads"])
    torch.manual_seed(training["seed"])
    try:
        tokenizer = train_tokenizer(corpus.read_split("train"))
        stream = _token_stream(tokenizer, corpus.read_split("train"))

        config = LlamaConfig(**{k: v for k, v in spec.CONFIG.items() if k != "torch_dtype"})
        model = LlamaForCausalLM(config)
        opt = torch.optim.AdamW(
            model.parameters(), lr=training["lr"], weight_decay=training["weight_decay"]
        )
        steps, warmup = training["steps"], training["warmup_steps"]

        def lr_at(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
        gen = torch.Generator().manual_seed(training["seed"])
        seq, bs = training["seq_len"], training["batch_size"]
        model.train()
        bar = progress.bar(range(steps), desc="training tiny-llama", unit="step")
        for _ in bar:
            starts = torch.randint(0, len(stream) - seq - 1, (bs,), generator=gen)
            batch = torch.stack([stream[s : s + seq] for s in starts.tolist()])
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)

        ppl = heldout_perplexity(model, tokenizer) if measure else None
        # transformers' `to` is wrapped in functools.wraps(nn.Module.to), which loses the method's
        # binding for a type checker: it reads the dtype as `self`
        model = model.to(torch.bfloat16)  # type: ignore[arg-type]
        ppl_bf16 = heldout_perplexity(model, tokenizer) if measure else None
        model.config.torch_dtype = torch.bfloat16
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        info = {
            "key": key,
            "training": training,
            "train_tokens_seen": steps * bs * seq,
            "train_stream_tokens": len(stream),
            "heldout_perplexity_fp32": ppl and round(ppl, 3),
            "heldout_perplexity_bf16": ppl_bf16 and round(ppl_bf16, 3),
            "build_seconds": round(time.time() - started, 1),
        }
        (out / "build.json").write_text(json.dumps(info, indent=2) + "\n")
        said = f"held-out perplexity {ppl_bf16:.2f} (bf16)" if measure else "not measured"
        print(f"tiny-llama built: {said}", flush=True)
    finally:
        torch.set_num_threads(threads)
