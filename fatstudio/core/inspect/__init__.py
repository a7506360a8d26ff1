"""Looking into a trained model: inference, prompting, scoring, attention maps, head scores, probes, diagnostics."""
