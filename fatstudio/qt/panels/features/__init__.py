"""The Features tab: dictionaries (SAEs, transcoders) of the focused run, their features and attribution graphs."""
