"""The llama.cpp engine adapter (GGUF). Import `launcher.engines.llamacpp.engine.LlamaCppEngine`.

llama-cpp-python is imported lazily, only when the engine is asked for its availability or
to load a model, so importing this package never needs the runtime.
"""
