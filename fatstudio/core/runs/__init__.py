"""Runs on disk and what is made from them: run folders, presets, reference curves, TensorBoard logs,
the HF export, the tokenizer lab."""
