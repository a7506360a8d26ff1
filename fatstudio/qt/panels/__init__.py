"""The panels of the main window: model, corpus, train, prompt, attention."""
