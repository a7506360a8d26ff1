"""The Attention tab: the panel (`panel`) and its parts, each a class that takes the application model: the probe maps
over training (`probes`), the head scores (`scores`), the lens (`lens`), the knock-out table (`ablation`), a head
knocked out on the text (`head_ablation`), patching (`patching`) and the export (`export`)."""
