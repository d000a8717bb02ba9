"""The model repository and one module per model family behind one loader registry
(models/registry.py). The engine serves what these build; it never reads a model file."""
