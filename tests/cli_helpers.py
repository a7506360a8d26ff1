"""What the command-line tests share: a tiny run's config (format it with ``corpus`` and ``steps``)."""
TOML = """
[model]
l_max = 16
L = 1
H = 2
d_e = 16
d_mlp = 32
[data]
corpus = "{corpus}"
[train]
steps = {steps}
batch_size = 4
eval_interval = 10
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 5
device = "cpu"
"""
