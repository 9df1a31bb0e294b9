"""Model files: the model store, GGUF and export checks."""
