"""GPU benchmark, fatstudio against nanoGPT in the same run (with --smoke: a few-second CPU check of the same code).

    python bench/bench_gpu.py [--parts abc] [--no-compile] [--peak-flops F]
    python bench/bench_gpu.py --smoke            # tiny sizes, 2 steps, CPU; nanoGPT only if present

(a) throughput: a GPT of 12 layers, 12 heads, d_e 768, context 1024, batch 16, vocab 50304, no biases, tied
    unembedding (nanoGPT's bench.py model), random tokens, bf16 autocast, AdamW (fused) with clipping at 1.0.
    fatstudio's step is the product's: fatstudio.core.training.make_optimizer and task_loss (compiled as a
    whole, as the trainer compiles it); nanoGPT's is GPT from its model.py with configure_optimizers. Eager,
    then torch.compile (unless --no-compile). Printed: ms/iter, tokens/s, peak memory
    (torch.cuda.max_memory_allocated), MFU = tokens/s × (6N + 12·L·H·d_head·T) / peak bf16 FLOP/s (nanoGPT's
    estimate_mfu; N without the position table; the peak from the device's name: H100 SXM 989e12, H100 PCIe
    756e12, H200 989e12, A100 312e12, or --peak-flops), and fatstudio/nanoGPT (targets: MFU ≥ 40%, ratio ≥ 1).
(b) time to val loss ≤ 1.47 on nanoGPT's GPU shakespeare_char config: `fatstudio train
    bench/shakespeare_char_gpu.toml` against nanoGPT's `train.py config/train_shakespeare_char.py
    --device=cuda --always_save_checkpoint=True`, each run to its end, with the weights of every evaluation
    kept (fatstudio's snapshots; nanoGPT's checkpoints, each to its own file through peers' runner) and the
    seconds from the process's start to each evaluation line, timed by this parent. Then every kept
    evaluation of both is scored on the SAME 200 validation batches of 64 windows of 256 characters
    (peers.SameWindows, as bench_train scores: each program's windows in its own vocabulary), since each
    program's own printed estimate is a mean over its own random windows. Printed per side: the first
    evaluation at or under the target on those windows (step, seconds, that loss beside the program's own
    estimate, and where the own estimate first reached it), or "not reached" with the best; then the ratio
    nanoGPT/fatstudio of the seconds (target ≥ 1).
(c) the presets (resources/presets): steps/s of a short run of each on the GPU and on the CPU.
On a machine without a CUDA GPU this says so and runs the smoke test.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

GPU_TOML = peers.ROOT / "bench" / "shakespeare_char_gpu.toml"
PEAK_BF16 = (("H100", "PCIe", 756e12), ("H100", "", 989e12), ("H200", "", 989e12), ("A100", "", 312e12))
FULL = dict(L=12, H=12, d_e=768, T=1024, batch=16, vocab=50304, warmup=10, steps=20, preset_steps=200, val_batches=200)
SMOKE = dict(L=2, H=2, d_e=32, T=32, batch=4, vocab=256, warmup=1, steps=2, preset_steps=3, val_batches=2)
SMOKE_SETS = ["model.L=1", "model.H=2", "model.d_e=32", "model.d_mlp=64", "model.l_max=32", "train.steps=4",
              "train.batch_size=4", "train.eval_interval=2", "train.eval_iters=2", "train.warmup=1",
              "train.checkpoint_interval=2", "train.device=\"cpu\"", "train.precision=\"fp32\"", "train.compile=false"]
SMOKE_NANO = ["--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=1", "--n_head=2", "--n_embd=32",
              "--block_size=32", "--batch_size=4", "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=2",
              "--eval_iters=2", "--warmup_iters=1"]


def peak_flops(name: str) -> float | None:
    return next((v for key, variant, v in PEAK_BF16 if key in name and variant in name), None)


# ---- (a) throughput -------------------------------------------------------------------------------------
def fatstudio_step(s: dict, dev, compiled: bool):
    import torch

    from fatstudio import ModelConfig, TrainConfig, build_model
    from fatstudio.core.training import make_optimizer, task_loss

    model = build_model(ModelConfig(arch="gpt", vocab_size=s["vocab"], l_max=s["T"], L=s["L"], H=s["H"], d_e=s["d_e"],
                                    d_mlp=4 * s["d_e"], bias=False, tie_embeddings=True, dropout=0.0)).to(dev)
    opt = make_optimizer(model, TrainConfig(lr=1e-4, weight_decay=1e-2, beta2=0.95))

    def loss_fn(batch):
        return task_loss(model, batch, "next_token")
    if compiled:
        loss_fn = torch.compile(loss_fn)

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = loss_fn({"x": x, "y": y})[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return step, model.num_parameters() - s["T"] * s["d_e"]


def nanogpt_step(module, s: dict, dev, compiled: bool):
    import torch

    with peers.quiet():
        model = module.GPT(module.GPTConfig(block_size=s["T"], vocab_size=s["vocab"], n_layer=s["L"], n_head=s["H"],
                                            n_embd=s["d_e"], dropout=0.0, bias=False)).to(dev)
        opt = model.configure_optimizers(1e-2, 1e-4, (0.9, 0.95), dev.type)
    run = torch.compile(model) if compiled else model

    def step(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            _, loss = run(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return step, model.get_num_params()


def measure(make, s: dict, dev) -> dict:
    """ms/iter and tokens/s over s["steps"] steps after s["warmup"] (compiling happens there), peak memory."""
    import torch

    cuda = dev.type == "cuda"
    if "torch._dynamo" in sys.modules:  # drop what an earlier measurement compiled (and the model it holds)
        sys.modules["torch._dynamo"].reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(s["vocab"], (s["batch"], s["T"]), generator=g).to(dev) for _ in range(2))
    t_build = time.perf_counter()
    step, n_params = make()
    for _ in range(s["warmup"]):
        step(x, y).item()
    warm_s = time.perf_counter() - t_build
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(s["steps"]):
        step(x, y).item()  # a sync per step, as nanoGPT's bench.py does
    if cuda:
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / s["steps"]
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else math.nan
    del step
    gc.collect()
    return {"ms": dt * 1e3, "tps": s["batch"] * s["T"] / dt, "peak_gib": peak, "n_params": n_params, "warm_s": warm_s}


def part_a(s: dict, dev, module, compile_modes, peak: float | None) -> None:
    flops_per_token = None
    print(f"(a) throughput: GPT L={s['L']} H={s['H']} d_e={s['d_e']} T={s['T']} batch {s['batch']} vocab {s['vocab']}, "
          f"bf16 autocast, {s['steps']} steps after {s['warmup']} warm-up (target MFU ≥ 40%)", flush=True)
    for compiled in compile_modes:
        row = {}
        sides = {"fatstudio": lambda c=compiled: fatstudio_step(s, dev, c)}
        if module:
            sides["nanoGPT"] = lambda c=compiled: nanogpt_step(module, s, dev, c)
        for name, make in sides.items():
            r = row[name] = measure(make, s, dev)
            flops_per_token = flops_per_token or 6 * r["n_params"] + 12 * s["L"] * s["d_e"] * s["T"]
            mfu = f"{100 * r['tps'] * flops_per_token / peak:.1f}%" if peak else "n/a"
            mem = "n/a" if math.isnan(r["peak_gib"]) else f"{r['peak_gib']:.2f} GiB"
            print(f"    {name:9s} {'compiled' if compiled else 'eager':8s}: {r['ms']:8.1f} ms/iter, "
                  f"{r['tps']:10,.0f} tokens/s, peak memory {mem}, MFU {mfu} "
                  f"(build + warm-up {r['warm_s']:.1f} s)", flush=True)
        if module:
            print(f"    {'compiled' if compiled else 'eager'}: fatstudio/nanoGPT tokens/s = "
                  f"{peers.ratio(row['fatstudio']['tps'], row['nanoGPT']['tps'])} (target ≥ 1)")


# ---- (b) time to the target validation loss, on the same windows ---------------------------------------
def time_to_target(name: str, proc: peers.Proc, scorers: dict, target: float) -> float | None:
    """Score the evaluations (``scorers``: step → a call giving its same-window loss) in step order up to the first
    at or under ``target``; print it, or the best when none is, beside the program's own estimate. Returns the
    seconds from the process's start to that evaluation's line, or None."""
    own = proc.evaluations()
    same: dict[int, float] = {}
    for step in sorted(scorers.keys() & own.keys()):
        same[step] = scorers[step]()
        if same[step] <= target:
            break
    first_own = next((s for s, (v, _) in own.items() if v <= target), None)
    head = f"    {name:9s}: whole process {proc.wall_s:.1f} s; "
    if not same:
        print(head + "no evaluation with its weights kept")
        return None
    step = min(same, key=same.__getitem__)  # the first at or under the target, else the best
    reached = same[step] <= target
    print(head + ("reached" if reached else f"not reached in {max(own)} steps; best") + f" at step {step}, "
          f"{own[step][1]:.1f} s: {same[step]:.4f} on the same windows, own estimate {own[step][0]:.4f} (own estimate "
          f"first ≤ {target}: " + (f"step {first_own}, {own[first_own][1]:.1f} s)" if first_own is not None else "never)"),
          flush=True)
    return own[step][1] if reached else None


def part_b(smoke: bool, corpus: Path, checkout: Path | None, target: float, compiled: bool, dev, batches: int) -> None:
    from fatstudio.core.runs.folder import Run

    print(f"(b) time to val loss ≤ {target} on nanoGPT's GPU shakespeare_char config, every evaluation scored on "
          f"the same {batches} validation batches" + (" (smoke: a tiny model, 4 steps, CPU)" if smoke else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp, \
            (peers.NanoGPT(checkout) if checkout else contextlib.nullcontext()) as nano:
        sets = [f"data.corpus={peers.toml_str(corpus)}", *(SMOKE_SETS if smoke else []),
                *([] if compiled else ["train.compile=false"])]
        procs = {"fatstudio": peers.run_timed(peers.fatstudio_train_cmd(GPU_TOML, Path(tmp) / "run", sets)).check(
            "fatstudio train")}
        if nano:
            stoi = nano.prepare_shakespeare_char(corpus)["stoi"]
            args = ["config/train_shakespeare_char.py", "--out_dir=out-gpu", "--always_save_checkpoint=True",
                    *(SMOKE_NANO if smoke else ["--device=cuda", f"--compile={compiled}"])]
            procs["nanoGPT"] = nano.run("train.py", args, keep_checkpoints=True).check("nanoGPT train.py")
        run = Run.open(Path(tmp) / "run")
        windows = peers.SameWindows.draw(corpus.read_text(encoding="utf-8"), batches, run.config.train.batch_size,
                                         run.config.model.l_max, dev.type)
        scorers = {"fatstudio": {s: lambda s=s: windows.fatstudio(run.load_model(dev.type, step=s))
                                 for s in run.weight_steps()}}
        if nano:
            module = peers.nanogpt_model(nano.dir)
            scorers["nanoGPT"] = {s: lambda c=c: windows.nanogpt(peers.load_nanogpt_checkpoint(module, c, dev.type)[0],
                                                                 stoi) for s, c in nano.checkpoints("out-gpu").items()}
        secs = {name: time_to_target(name, procs[name], scorers[name], target) for name in procs}
    if len(secs) == 2 and None not in secs.values():
        print(f"    nanoGPT/fatstudio time to {target} on the same windows: "
              f"{peers.ratio(secs['nanoGPT'], secs['fatstudio'])} (target ≥ 1)")


# ---- (c) presets ----------------------------------------------------------------------------------------
def preset_speed(cfg, steps: int, device: str) -> float:
    """Steps/s of a short run, between the first and last Steps events (the first, warm-up, batch excluded)."""
    from fatstudio.core.training import train

    cfg = cfg.with_overrides([f"train.steps={steps}", f"train.eval_interval={steps}", "train.eval_iters=1",
                              f"train.checkpoint_interval={steps}", "train.sample_tokens=0", f"train.device=\"{device}\""])
    points, t0, t1 = [], None, None
    with tempfile.TemporaryDirectory(prefix="bench-preset-") as tmp:
        for ev in train(cfg, runs_root=Path(tmp)):
            if ev.kind == "started":
                t0 = time.perf_counter()
            elif ev.kind == "steps":
                points.append((ev.step, ev.elapsed_s))
            elif ev.kind == "finished":
                t1 = time.perf_counter()
    if len(points) >= 3:
        (s0, e0), (s1, e1) = points[0], points[-1]
        return (s1 - s0) / (e1 - e0)
    return steps / (t1 - t0)


def part_c(devices: list[str], steps: int, smoke_corpus: Path | None) -> None:
    from fatstudio.core.runs.presets import load_presets

    print(f"(c) presets, {steps} steps each: steps/s on {' and '.join(devices)}", flush=True)
    for p in load_presets():
        cfg = p.config
        if smoke_corpus and cfg.data.corpus == "python-stdlib":  # the smoke skips loading the stdlib
            cfg = cfg.with_overrides([f"data.corpus={peers.toml_str(smoke_corpus)}"])
        speed = {d: preset_speed(cfg, steps, d) for d in devices}
        ratio = f" → {peers.ratio(speed['cuda'], speed['cpu'])}" if len(speed) == 2 else ""
        print(f"    {p.key:18s} " + ", ".join(f"{d} {v:8.1f} steps/s" for d, v in speed.items()) + ratio, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 2-3 steps, on the CPU; nanoGPT only if present")
    ap.add_argument("--parts", default="abc", help="which parts to run (default abc)")
    ap.add_argument("--no-compile", action="store_true", help="eager only (a), and uncompiled training (b)")
    ap.add_argument("--peak-flops", type=float, help="the device's peak bf16 dense FLOP/s (default: from its name)")
    ap.add_argument("--target", type=float, default=1.47, help="validation loss for (b) (default 1.47)")
    ap.add_argument("--corpus", default=str(peers.CORPUS), help="tinyshakespeare (default ../shared/data/tinyshakespeare.txt)")
    ap.add_argument("--fatstudio-only", action="store_true", help="skip nanoGPT")
    a = ap.parse_args(argv)
    import torch

    if not a.smoke and not torch.cuda.is_available():
        print("no CUDA GPU here: running the CPU smoke test instead (--smoke)", flush=True)
        a.smoke = True
    peers.header("bench_gpu" + (" --smoke" if a.smoke else ""))
    checkout = None if a.fatstudio_only else peers.find_nanogpt()
    if checkout is None and not a.fatstudio_only:
        if not a.smoke:
            peers.require_nanogpt()  # exits with the message
        print(f"peer missing: {peers.missing_message()} Running fatstudio's side only.", flush=True)
    elif checkout:
        print(f"nanoGPT: {peers.describe(checkout)}", flush=True)
    dev = torch.device("cpu" if a.smoke else "cuda")
    name = "CPU" if a.smoke else torch.cuda.get_device_name()
    peak = a.peak_flops or (None if a.smoke else peak_flops(name))
    print(f"device: {name}; peak bf16 {f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown (MFU n/a; give --peak-flops)'}")
    if not a.smoke:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # as nanoGPT sets them
    s = SMOKE if a.smoke else FULL
    with tempfile.TemporaryDirectory(prefix="bench-gpu-corpus-") as tmp:
        corpus = Path(a.corpus)
        if a.smoke:  # a small corpus: tinyshakespeare's start, or any text when it is absent (CI)
            text = corpus.read_text(encoding="utf-8")[:20000] if corpus.is_file() else \
                "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7919 % 1000}.\n" for i in range(400))
            corpus = Path(tmp) / "smoke.txt"
            corpus.write_text(text, encoding="utf-8")
        else:
            corpus = peers.require_corpus(corpus)
        if "a" in a.parts:
            module = peers.nanogpt_model(checkout) if checkout else None
            part_a(s, dev, module, [False] if a.smoke or a.no_compile else [False, True], peak)
        if "b" in a.parts:
            runnable = checkout and not (missing := peers.missing_modules(("numpy", "requests")))
            if checkout and not runnable:
                print(f"    (b) without nanoGPT: its prepare.py needs {', '.join(missing)}: pip install tiktoken requests")
            part_b(a.smoke, corpus, checkout if runnable else None, a.target, not a.no_compile, dev, s["val_batches"])
        if "c" in a.parts:
            part_c(["cpu"] if a.smoke else ["cuda", "cpu"], s["preset_steps"], corpus if a.smoke else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
