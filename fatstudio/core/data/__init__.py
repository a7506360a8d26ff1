"""The data stage: corpora and their batches per task, tokenizers, streamed corpora, the corpus preview."""
