"""The export pipeline: a Hugging Face checkpoint or a GGUF file becomes an ONNX
decoder (fp32, int8, int4) or a GGUF file (f16, q8_0, q4_k_m, q4_0, ternary), optionally with a
VocabTrim'd LM head, plus a manifest that records where it came from and how well
it matches its source. `edgespec export` drives it; see `pipeline.run_export`.
"""
