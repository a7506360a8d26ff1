"""What a new run that starts from another run's weights (``train --init-from``, the app's Fine-tune…) takes from
that run and what from its own config (`init_config`): light (no torch, no tokenizers), so the window's rules for
runs can ask it."""
from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import TYPE_CHECKING

from ..config import DataConfig, ModelConfig, RunConfig

if TYPE_CHECKING:
    from .folder import Run

# what a fine-tuning run takes from its config rather than from the run it starts from: dropout is a training choice
# that changes no weight (N_V and the class head come from the source's tokenizer and the dataset, checked as they do)
_NOT_FROM_SOURCE = ("dropout",)


def init_config(config: RunConfig, source: Run, given: Collection[str] | None = None) -> tuple[RunConfig, str]:
    """``config`` for a new run that starts from ``source``'s weights (``--init-from``), and the sentence that says
    what comes from ``source``. The model settings (all but ``model.dropout``), the tokenizer (``data.tokenizer``,
    ``data.vocab_size``) and the task are the source's: a key of them that ``config`` sets to another value is a
    ValueError naming each. ``given``: the ``table.key`` names the config sets (a config file's and ``--set``'s);
    None: those whose value is not the default; () (the app's Fine-tune…, whose settings are not for the model it
    starts from): none, so that all of them come from the source and the sentence says which."""
    model, data, theirs = config.model, config.data, source.config
    defaults = {"model": ModelConfig(), "data": DataConfig()}

    def set_to(table: str, name: str, value: object) -> bool:
        if given is None:
            return value != getattr(defaults[table], name)
        return f"{table}.{name}" in given

    n_v = theirs.model.vocab_size  # the source's tokenizer's N_V (its weights' too)
    resolved = theirs.model.resolved()  # a setting the source left to its default (None) is the value it resolved to
    clashes = [f"model.{f.name} = {getattr(model, f.name)!r} ({source.name} has {getattr(resolved, f.name)!r})"
               for f in dataclasses.fields(ModelConfig) if f.name not in _NOT_FROM_SOURCE
               and getattr(model, f.name) not in (getattr(theirs.model, f.name), getattr(resolved, f.name))
               and set_to("model", f.name, getattr(model, f.name))]
    if data.tokenizer != theirs.data.tokenizer and set_to("data", "tokenizer", data.tokenizer):
        clashes.append(f"data.tokenizer = {data.tokenizer!r} ({source.name}'s tokenizer is {theirs.data.tokenizer!r})")
    if data.vocab_size not in (n_v, theirs.data.vocab_size) and set_to("data", "vocab_size", data.vocab_size):
        clashes.append(f"data.vocab_size = {data.vocab_size!r} (no tokenizer is trained: {source.name}'s has N_V = {n_v})")
    if data.task != theirs.data.task and set_to("data", "task", data.task):
        clashes.append(f"data.task = {data.task!r} ({source.name}'s weights are trained for {theirs.data.task!r})")
    if clashes:
        raise ValueError(f"--init-from {source.path} starts from that run's model, tokenizer and task, which the config "
                         f"sets otherwise: {'; '.join(clashes)}; remove {'it' if len(clashes) == 1 else 'them'} "
                         "from the config.")
    r = theirs.model
    said = (f"starting from the weights of {source.name} (step {source.info.checkpoint_step}): its model ({r.arch}, "
            f"L = {r.L if r.arch != 'edt' else f'{r.L_enc}+{r.L_dec}'}, H = {r.H}, d_e = {r.d_e}, l_max = {r.l_max}), "
            f"its tokenizer ({'imported' if source.meta.get('hf_class') else theirs.data.tokenizer}, N_V = {n_v}) "
            f"and its task ({theirs.data.task}); the corpus and the training settings are the config's.")
    return RunConfig(theirs.model.replace(dropout=model.dropout),
                     data.replace(tokenizer=theirs.data.tokenizer, vocab_size=theirs.data.vocab_size, task=theirs.data.task),
                     config.train), said
