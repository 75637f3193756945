#!/usr/bin/env python3
"""Trains the demo model: a small Qwen3.5 (transformers' Qwen3_5ForCausalLM) and its MTP layer, jointly, on English
text, within a wall-clock budget on the GPU machine (issue 20 item 1).

    python3 tools/prepare_demo_text.py                      # here, once: .carry/demo-text/{train,heldout}.txt
    python3 tools/train_demo.py --text .carry/demo-text --out $OUT/demo --minutes 5.5    # on the GPU machine

The text is the reStructuredText sources of the Python 3.11 documentation that Debian's python3.11-doc package
ships (tutorial, references, HOWTOs; PSF licence): English technical prose in the domain the demo tokenizer was
trained on, plain text without scraping, and a few MB (see prepare_demo_text.py, which also turns section titles
and openings into chat turns so the model answers a chat prompt and ends its turn).

The model keeps the demo's tokenizer (tokenizer files copied from --tokenizer), vocabulary, special ids, head
shapes and max_position_embeddings; by default it is deeper (8 layers: 3 GDN + 1 full attention, twice) with a
wider MLP. Loss: next-token cross-entropy + --mtp-weight x the MTP layer's next-next-token cross-entropy (the MTP
layer reads the main model's final-norm rows and the next token's embedding; tools/mtp_reference.py). AdamW, a
cosine schedule over the wall-clock budget, bf16 autocast, fp32 master weights, a fixed seed. The budget is
--minutes, shrunk after the first seconds to what --max-epochs passes over the text take at the measured speed
(the text is a few MB: more passes overfit); the held-out loss is measured every --eval-seconds and the weights
with the best one are kept.

Writes into --out: config.json (the demo's, resized, with mtp_num_hidden_layers 1), model.safetensors in the stock
layout (linear_attn.A_log and linear_attn.norm.weight F32, everything else BF16, `mtp.*` beside `model.*` and
`lm_head.weight`), generation_config.json and the tokenizer files from --tokenizer, loss.csv, samples.txt (greedy
continuations and chat answers) and metrics.json (held-out loss, the MTP head's top-1 agreement with the main
model's next-next token: the acceptance-rate proxy). All numbers are measured with the weights as saved (BF16).

--toy runs on the CPU without transformers or tokenizers (a stand-in model and byte tokenizer) for the plumbing
test, tools/test_train_demo.py.
"""
import argparse
import csv
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network: never try the hub for kernels

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_file  # noqa: E402
import train_demo_data as data  # noqa: E402
from mtp_reference import Qwen35Mtp  # noqa: E402
from train_demo_eval import evaluate, greedy, greedy_acceptance  # noqa: E402
from train_demo_model import (build_model, forward, losses, model_config, round_to_stored,  # noqa: E402
                              stock_tensors)

RAW_PROMPTS = ["The for statement", "A list is", "To open a file,", "Python is a", "The following example shows"]
CHAT_PROMPTS = ["Tell me about list comprehensions.", "What is a dictionary?", "How do I read a file?",
                "Explain the with statement.", "Hello! Who are you?"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default=".carry/demo-text", help="folder with train.txt and heldout.txt")
    p.add_argument("--tokenizer", default="models/demo", help="folder with the demo's config and tokenizer files")
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=5.5, help="training wall-clock budget")
    p.add_argument("--max-epochs", type=float, default=30.0,
                   help="train for at most this many passes over the text (the budget shrinks to fit, measured "
                        "from the first seconds' speed): a few MB of text is overfitted long before minutes end")
    p.add_argument("--total-minutes", type=float, default=9.0,
                   help="training stops early enough to finish everything by then (the device call's limit)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--ffn", type=int, default=384)
    p.add_argument("--layers", type=int, default=8, help="a multiple of 4: [3 GDN, 1 full attention] repeated")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--mtp-weight", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=20261202)
    p.add_argument("--print-seconds", type=float, default=5.0)
    p.add_argument("--eval-seconds", type=float, default=15.0)
    p.add_argument("--eval-windows", type=int, default=48, help="held-out windows measured during training")
    p.add_argument("--final-windows", type=int, default=1000, help="held-out windows measured at the end")
    p.add_argument("--sample-tokens", type=int, default=96)
    p.add_argument("--toy", action="store_true", help="CPU, stand-in model and tokenizer, tiny sizes")
    p.add_argument("--toy-text-bytes", type=int, default=200_000)
    return p.parse_args(argv)


def write_json(path, value, **kwargs):
    with open(path, "w") as f:
        json.dump(value, f, indent=2, **kwargs)
        f.write("\n")


def write_model(args, c, model, mtp):
    """The loadable folder, written as soon as training ends (a later failure must not lose the weights)."""
    os.makedirs(args.out, exist_ok=True)
    tensors = stock_tensors(model, mtp)
    safetensors_file.write(os.path.join(args.out, "model.safetensors"), tensors, {"format": "pt"})
    write_json(os.path.join(args.out, "config.json"), dict(c, dtype="bfloat16"), sort_keys=True)
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.tokenizer, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    print(f"wrote {args.out}: {len(tensors)} tensors, {total / 1e6:.2f} MB of weights", flush=True)


def write_reports(args, history, metrics, samples):
    with open(os.path.join(args.out, "loss.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0].keys()) if history else ["step"])
        writer.writeheader()
        writer.writerows(history)
    with open(os.path.join(args.out, "samples.txt"), "w", encoding="utf-8") as f:
        for prompt, text in samples:
            f.write(f"=== prompt: {prompt!r}\n{text}\n\n")
    write_json(os.path.join(args.out, "metrics.json"), metrics)


def main(argv=None):
    args = parse_args(argv)
    started = time.time()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() and not args.toy else "cpu"
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def autocast():
        return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    tokenizer = data.ByteTokenizer(args.tokenizer) if args.toy else data.HfTokenizer(args.tokenizer)
    limit = args.toy_text_bytes if args.toy else None
    train = data.encode_corpus(tokenizer, os.path.join(args.text, "train.txt"), limit)
    heldout = data.encode_corpus(tokenizer, os.path.join(args.text, "heldout.txt"), limit)
    eval_windows = data.fixed_windows(heldout, args.eval_windows, args.seq)
    print(f"tokens: train {len(train):,}, held-out {len(heldout):,} ({time.time() - started:.0f}s)", flush=True)

    c = model_config(args)
    model = build_model(c, args.toy).to(device).float().train()
    mtp = Qwen35Mtp.from_config(c).to(device).float().train()
    with torch.no_grad():
        for p in mtp.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, c.get("initializer_range", 0.02))
    if not args.toy:
        import train_demo_checks
        train_demo_checks.before_training(model, mtp, c, device)
    params = list(model.named_parameters()) + [("mtp." + n, p) for n, p in mtp.named_parameters()]
    decay = [p for n, p in params if p.dim() >= 2]
    no_decay = [p for n, p in params if p.dim() < 2]
    print(f"parameters: {sum(p.numel() for _, p in params):,} ({len(params)} tensors)", flush=True)
    extra = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), **extra)

    t0 = time.time()
    # The end (evaluation, samples, files, checks) takes about a minute on the GPU machine: keep two.
    budget = max(0.0, min(args.minutes * 60, started + args.total_minutes * 60 - 120 - t0))
    print(f"training for at most {budget:.0f}s or {args.max_epochs:g} epochs", flush=True)
    sized = False
    last_print = last_eval = t0
    step = tokens = 0
    history, best, best_loss = [], None, float("inf")
    running = torch.zeros(2, device=device)
    running_n = 0
    while True:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        if not sized and elapsed >= 15 and step >= args.warmup_steps:
            needed = args.max_epochs * len(train) / (tokens / elapsed)
            budget = min(budget, max(needed, elapsed + 1))
            sized = True
            print(f"{tokens / elapsed / 1e3:.0f}k tok/s: {args.max_epochs:g} epochs take {needed:.0f}s; "
                  f"training for {budget:.0f}s", flush=True)
        # Cosine over the wall-clock budget (the step count is not known ahead), after a linear warmup.
        cosine = 0.1 + 0.45 * (1 + math.cos(math.pi * elapsed / budget))  # 1 at the start, 0.1 at the end
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * cosine
        for group in opt.param_groups:
            group["lr"] = lr
        windows = data.random_windows(train, args.batch, args.seq, generator).to(device, non_blocking=True)
        with autocast():
            logits, mtp_logits = forward(model, mtp, windows)
        main_loss, mtp_loss = losses(logits, mtp_logits, windows)
        loss = main_loss + args.mtp_weight * mtp_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        step += 1
        tokens += windows.numel() - windows.shape[0]
        running += torch.stack([main_loss.detach(), mtp_loss.detach()])
        running_n += 1
        now = time.time()
        if now - last_print >= args.print_seconds or now - t0 >= budget:
            train_loss, train_mtp = (running / running_n).tolist()
            row = {"step": step, "seconds": round(now - t0, 1), "tokens": tokens, "lr": f"{lr:.3g}",
                   "train_loss": round(train_loss, 4), "train_mtp_loss": round(train_mtp, 4),
                   "heldout_loss": "", "heldout_mtp_loss": "", "heldout_mtp_agreement": ""}
            if now - last_eval >= args.eval_seconds or now - t0 >= budget:
                m = evaluate(model, mtp, eval_windows, device, autocast)
                row.update(heldout_loss=round(m["loss"], 4), heldout_mtp_loss=round(m["mtp_loss"], 4),
                           heldout_mtp_agreement=round(m["mtp_agreement"], 4))
                if m["loss"] < best_loss:
                    best_loss = m["loss"]
                    best = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                            {k: v.detach().clone() for k, v in mtp.state_dict().items()}, step)
                last_eval = time.time()
            history.append(row)
            print(f"step {step} {row['seconds']:.0f}s lr {lr:.2e} loss {train_loss:.3f} mtp {train_mtp:.3f} "
                  f"{tokens / (now - t0) / 1e3:.0f}k tok/s"
                  + (f" | held-out {row['heldout_loss']} mtp {row['heldout_mtp_loss']} "
                     f"agree {row['heldout_mtp_agreement']}" if row["heldout_loss"] != "" else ""), flush=True)
            running.zero_()
            running_n = 0
            last_print = time.time()
    train_seconds = time.time() - t0
    if best is not None:
        model.load_state_dict(best[0])
        mtp.load_state_dict(best[1])
        print(f"kept the weights of step {best[2]} (best held-out loss {best_loss:.4f})", flush=True)
    round_to_stored(model, mtp)
    write_model(args, c, model, mtp)

    all_windows = data.fixed_windows(heldout, args.final_windows, args.seq)
    final = evaluate(model, mtp, all_windows, device, autocast)
    prompts = [w[:64].tolist() for w in data.fixed_windows(heldout, 8, 64 + args.sample_tokens)]
    continued = greedy(model, prompts, args.sample_tokens, None, device, autocast)
    final["greedy_mtp_acceptance"] = greedy_acceptance(model, mtp, continued, 64, device, autocast)
    end_id = tokenizer.token_id("<|im_end|>")
    samples = []
    chats = [f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n" for q in CHAT_PROMPTS]
    for text in RAW_PROMPTS + chats:
        ids = tokenizer.encode_batch([text])[0]
        samples.append((text, tokenizer.decode(greedy(model, [ids], args.sample_tokens, end_id, device, autocast)[0])))
    metrics = {"heldout": final, "train_seconds": round(train_seconds, 1), "steps": step, "tokens": tokens,
               "epochs": round(tokens / len(train), 2),
               "best_step": best[2] if best else step, "train_tokens": len(train), "heldout_tokens": len(heldout),
               "args": vars(args), "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__}
    print("held-out (as saved): " + ", ".join(f"{k} {v:.4f}" for k, v in final.items()), flush=True)
    print(f"MTP top-1 agreement with the main model's next-next token: teacher-forced {final['mtp_agreement']:.3f}, "
          f"on its greedy continuations {final['greedy_mtp_acceptance']:.3f}", flush=True)
    for prompt, text in samples:
        print(f"--- {prompt!r}\n{text}", flush=True)
    write_reports(args, history, metrics, samples)
    if not args.toy:
        import train_demo_checks
        train_demo_checks.after_saving(model, args.out, device, all_windows[:4].to(device))
    print(f"done in {time.time() - started:.0f}s", flush=True)
    return metrics


if __name__ == "__main__":
    main()
