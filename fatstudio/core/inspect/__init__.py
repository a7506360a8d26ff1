"""Measuring a trained model: head scores, probes, ablation, patching, the logit lens and attribution, token loss."""
