"""Using a trained model: loading it (`loaded`), prompting and generation (Algorithms 14-15), the compiled decode
step, scoring a text, and the attention maps of a forward pass."""
