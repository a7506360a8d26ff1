"""Features: sparse dictionaries (SAEs and transcoders) trained on a model's hook points, what each feature does
(dashboards), attribution graphs through them, and interventions on them."""
