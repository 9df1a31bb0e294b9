"""A tiny Hugging Face checkpoint built on the fly: a byte-level BPE tokenizer
trained on a few lines, and a randomly initialised llama or qwen2 model."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The cache keeps recently used pages in memory.",
    "for i in range(10):\n    print(i * i)\n",
    "A sequential scan reads every page once; read-ahead helps it.",
] * 20

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build(folder: Path, arch: str = "llama", seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = TEMPLATE
    kw = dict(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, tie_word_embeddings=(arch == "qwen2"))
    config = LlamaConfig(**kw) if arch == "llama" else Qwen2Config(**kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger weights than the default init, so logits are far from uniform
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(8.0)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
