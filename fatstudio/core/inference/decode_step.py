"""A compiled decode step, one per loaded model: Algorithm 14's forward with static shapes
(`model.attention.StaticKVCache`), compiled once (`compile`: the app runs it as a job once a generation has run
without it, `wanted`) by the `Compiler` the device takes.

`inference.generate` asks it for a `session` at the start of each generation: once compiled (and not in use
by another generation) every forward of the generation goes through the static cache, compiled for one token
and for the window that is refilled when the context is full (eagerly for the prompt's first prefill); before
that, and wherever it cannot work, generation stays eager (the growing KVCache), with the same probabilities.
A long-lived process (the app) pays the one-off compile once; a one-shot command has no use for it.

On the CPU the step is compiled ahead of time in a child process and kept on disk for every model of that
shape (`decode_export.aot_compile`), which the command line uses where an earlier compile left it
(`load_cached`); on CUDA torch.compile compiles it here with mode="reduce-overhead" (CUDA graphs; the cache's
tensors are marked static). It cannot work, and says why once (`take_note`), for 'relative' positions
(Transformer-XL's scores slice a table of distances at the position), without a C++ compiler or Triton, or
where compiling fails.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import torch

from ..device import compile_problem, cpp_compiler_problem, model_device
from ..environment import COMPILE_DECODE
from ..model import Transformer
from ..model.attention import StaticKVCache
from ..threads import lower_priority
from .decode_export import CompileCancelled, allocated_cache, aot_compile, cached_steps, is_cached
from .prompting import default_slide

if TYPE_CHECKING:
    from .loaded import LoadedModel

Step = Callable[[torch.Tensor], torch.Tensor]  # x (1, T) ids -> logits (1, T, N_V), the cache advanced by T
Compiler = Callable[["DecodeStep"], dict[int, Step]]  # the compiled step of each of the decoder's lengths


def compiling_enabled() -> bool:
    """False where FATSTUDIO_COMPILE_DECODE=0 (the tests set it: no compile in the background of each one)."""
    return COMPILE_DECODE.value()


class Unavailable(RuntimeError):
    """The step cannot be compiled here (`device.compile_problem`); the message says why."""


def torch_compile(decoder: DecodeStep) -> dict[int, Step]:
    """torch.compile in this process, one graph of fixed shapes (no graph breaks) per length, with CUDA graphs:
    the cache's tensors and its position are marked static, for the graphs write to them in place (a mutated
    input that is not static turns CUDA graphs off)."""
    for t in (decoder.cache.position, *(t for kv in decoder.cache.tensors().values() for t in kv)):
        torch._dynamo.mark_static_address(t)
    return {T: torch.compile(decoder.own_step(), fullgraph=True, dynamic=False, mode="reduce-overhead")
            for T in decoder.lengths}


def default_compiler(decoder: DecodeStep) -> dict[int, Step]:
    """On the CPU the step an earlier compile left in the cache folder (`decode_export.cached_steps`; before
    anything imports the compiler), else compiled ahead of time in a child process (`decode_export.aot_compile`);
    on CUDA `torch_compile`."""
    if decoder.device.type == "cpu" and (steps := cached_steps(*decoder.parts())) is not None:
        return steps
    problem = cpp_compiler_problem() if decoder.device.type == "cpu" else compile_problem(decoder.device)
    if problem is not None:  # on the CPU the child says any other problem (its last line, in the note)
        raise Unavailable(problem)
    if decoder.device.type == "cuda":
        return torch_compile(decoder)
    if decoder.device.type == "cpu":
        if getattr(sys, "frozen", False):
            raise Unavailable("the standalone bundle has no Python of its own to compile it with")
        return aot_compile(*decoder.parts(), cancel=decoder.cancelling)
    raise Unavailable(f"the step is compiled for the CPU and CUDA, not for {decoder.device.type}")


class Compiled(NamedTuple):
    """What one generation uses: the static cache (reset it to refill it) and the step (any T, compiled for
    those with a graph)."""

    cache: StaticKVCache
    step: Step


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


class DecodeStep:
    """The compiled steps of a decoder-only model over its static cache: one graph for a token and one for the
    window `generate` refills when the context is full (``lengths``: 1 and l_max + 1 - its default slide).
    `compile` compiles with ``compiler``; a `session` without it marks it `wanted`; `cancel` ends a compile on the
    CPU early (the app is closing, or another model's compile supersedes it)."""

    def __init__(self, model: Transformer, *, compiler: Compiler = default_compiler):
        self.model, self.compiler = model, compiler
        self.device = model_device(model)
        self.cache = StaticKVCache(self.device)
        l_max = model.config.l_max
        self.lengths = sorted({1, l_max + 1 - default_slide(l_max)})
        self.compile_s: float | None = None  # how long compiling took, once ready
        self._graphs: dict[int, Step] = {}  # T -> the compiled step for x of shape (1, T)
        self._started = False
        self._wanted = False  # a generation asked for the compiled step before it was ready
        self._note: str | None = None
        self._in_use = threading.Lock()  # held by compiling, then by the generation using the cache
        self._state = threading.Lock()
        self._done = threading.Event()
        self.cancelling = threading.Event()  # set by `cancel`, for the compiler; cleared when compiling ends

    @property
    def ready(self) -> bool:
        return bool(self._graphs)

    def problem(self) -> str | None:
        """Why this model has no static step, or None."""
        cfg = self.model.config
        if cfg.arch not in ("gpt", "gopher"):
            return f"a {cfg.arch!r} model does not generate token by token"
        if cfg.positions == "relative":
            return "relative positions slice their table at the position, so the step has no fixed shapes"
        return None

    @property
    def wanted(self) -> bool:
        """A generation ran eagerly because there was no compiled step, and none is compiling yet: the long-lived
        process (the app) compiles it now, as a job (`compile`)."""
        return self._wanted and not self._started

    @property
    def done(self) -> bool:
        """Compiling has ended, ready or not."""
        return self._done.is_set()

    def compile(self) -> None:
        """Compile, once, in the calling thread (a job's: at the lowest CPU priority); a second call waits for the
        first to end."""
        with self._state:
            started, self._started = self._started, True
        if started:
            self._done.wait()
            return
        if threading.current_thread() is not threading.main_thread():
            lower_priority()  # compiling takes what training and the GUI leave
        problem = self.problem()
        if problem is None:
            try:
                t0 = time.perf_counter()
                with self._in_use:
                    self.cache = allocated_cache(self.model)
                    with torch.inference_mode():
                        graphs = self.compiler(self)
                        for T, graph in graphs.items():  # a first call (CUDA graphs are recorded here)
                            self.cache.reset()
                            graph(torch.zeros((1, T), dtype=torch.long, device=self.device))
                self.compile_s, self._graphs = time.perf_counter() - t0, graphs
            except CompileCancelled:
                self._cancelled()
                return
            except Unavailable as e:
                problem = str(e)
            except Exception as e:  # any failure of the compiler leaves generation eager
                problem = f"compiling failed ({_first_line(e)})"
        self._note = None if problem is None else f"Generation runs eagerly (not compiled): {problem}."
        self._done.set()

    def cancel(self) -> None:
        """Stop a compile in progress (on the CPU its child process is killed: the app need not wait for it to
        quit); the step stays eager, and still `wanted`, so that a later generation compiles it again."""
        self.cancelling.set()

    def _cancelled(self) -> None:
        with self._state:
            self._started = False
            done, self._done = self._done, threading.Event()
            self.cancelling.clear()
        done.set()  # a second `compile` waiting on the first one returns (not ready)

    def load_cached(self) -> bool:
        """For a one-shot process (the command line), instead of `compile`: the step of this model's shape if an
        earlier compile left it in the cache folder (`decode_export.cached_steps`: milliseconds); never compiles.
        True if the step is ready."""
        with self._state:
            if self._started:
                return self.ready
            self._started = True
        if self.problem() is None and self.device.type == "cpu" and is_cached(self.model, self.lengths):
            with contextlib.suppress(Exception), self._in_use:  # a package that cannot be loaded: eager
                self.cache = allocated_cache(self.model)
                self._graphs = cached_steps(*self.parts()) or {}
        self._done.set()
        return self.ready

    def wait(self, timeout: float | None = None) -> bool:
        """Compile here if nothing has started compiling, else wait until it has ended, ready or not (False:
        ``timeout`` seconds passed)."""
        with self._state:
            started, done = self._started, self._done
        if not started:
            self.compile()
        return done.wait(timeout)

    def parts(self) -> tuple[Transformer, StaticKVCache, list[int]]:
        """What a step is compiled for: the model, its static cache and the lengths."""
        return self.model, self.cache, self.lengths

    def eager_step(self, x: torch.Tensor) -> torch.Tensor:
        """The step that gets compiled: the logits of x (1, T) at the cache's position."""
        return self.model(x, cache=self.cache)

    def own_step(self) -> Step:
        """`eager_step` with a code object of its own: Dynamo keeps its graphs per code object, so each graph
        is this one's alone (never tried for another model or length, nor counted in another's recompile
        limit) and goes with it."""
        f = DecodeStep.eager_step
        return types.MethodType(types.FunctionType(f.__code__.replace(), f.__globals__, f.__name__), self)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        """`eager_step`, compiled where T has a graph (any other length, e.g. a prompt's prefill, runs eagerly)."""
        return self._graphs.get(x.shape[1], self.eager_step)(x)

    def take_note(self) -> str | None:
        """Why generation stays eager, the first time it is asked once that is known; else None."""
        with self._state:
            note, self._note = self._note, None
        return note

    @contextlib.contextmanager
    def session(self) -> Iterator[Compiled | None]:
        """For one generation: the static cache and the compiled step, or None while compiling, where it
        cannot compile, or while another generation uses it; without it the step is `wanted`. Compiling starts
        when that generation ends, not beside it: in the same process it would take the GIL from the generation at
        every tensor operation (an eager generation ran at 26 instead of 838 tokens/s while it compiled)."""
        if not self.ready or not self._in_use.acquire(blocking=False):
            try:
                yield None
            finally:
                self._wanted = True
            return
        try:
            yield Compiled(self.cache, self.step)
        finally:
            self._in_use.release()


def decode_step_of(loaded: LoadedModel) -> DecodeStep:
    """The loaded model's DecodeStep, made at the first call and kept on it (``loaded.decoder``): one per loaded
    model, so it compiles once, in the background, at its first use."""
    if loaded.decoder is None:
        loaded.decoder = DecodeStep(loaded.model)
    return loaded.decoder


__all__ = ["Compiled", "Compiler", "DecodeStep", "Unavailable", "compiling_enabled", "decode_step_of",
           "default_compiler", "torch_compile"]
