"""GPU devices (llama.cpp's Vulkan, ONNX Runtime's providers) and device profiles."""
