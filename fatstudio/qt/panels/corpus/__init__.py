"""The Corpus tab (`panel`) and its tokenizer lab (`tokenizer_lab`)."""
