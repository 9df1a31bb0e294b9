"""llama.cpp's KV cache types and what one element of each holds."""

KV_TYPES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # bytes per element, blocks included
KV_QUALITY = ("f16", "q8_0", "q4_0")  # best first; quantized V needs flash attention in llama.cpp
