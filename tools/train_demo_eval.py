"""Measurements for tools/train_demo.py: held-out losses and top-1 rates, greedy continuations, and the MTP
layer's acceptance on the model's own greedy continuations."""
import torch

from train_demo_model import forward, losses


@torch.no_grad()
def evaluate(model, mtp, windows, device, autocast, batch=32):
    """Held-out means: main loss, MTP loss, main top-1 accuracy, MTP top-1 accuracy, and the MTP head's top-1
    agreement with the main model's own prediction of the same token (the acceptance-rate proxy)."""
    model.eval()
    mtp.eval()
    sums = torch.zeros(5, dtype=torch.float64)
    count = 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch].to(device)
        with autocast():
            logits, mtp_logits = forward(model, mtp, w)
        main, extra = losses(logits, mtp_logits, w)
        top, mtp_top = logits.argmax(-1), mtp_logits.argmax(-1)
        n = len(w)
        sums += torch.tensor([main.item() * n, extra.item() * n,
                              (top == w[:, 1:]).float().mean().item() * n,
                              (mtp_top == w[:, 2:]).float().mean().item() * n,
                              (mtp_top == top[:, 1:]).float().mean().item() * n], dtype=torch.float64)
        count += n
    model.train()
    mtp.train()
    keys = ("loss", "mtp_loss", "top1", "mtp_top1", "mtp_agreement")
    return {k: v / count for k, v in zip(keys, sums.tolist())}


@torch.no_grad()
def greedy(model, prompts, steps, stop_id, device, autocast):
    """Greedy continuations of equal-length prompts, together, by whole-sequence recomputation (no cache); a row
    that produced stop_id is cut there."""
    model.eval()
    seq = torch.tensor(prompts, device=device)
    for _ in range(steps):
        with autocast():
            logits = model(input_ids=seq, use_cache=False).logits
        seq = torch.cat([seq, logits[:, -1].float().argmax(-1, keepdim=True)], dim=1)
        if stop_id is not None and bool((seq[:, len(prompts[0]):] == stop_id).any(-1).all()):
            break
    model.train()
    outs = []
    for row in seq.tolist():
        new = row[len(prompts[0]):]
        if stop_id in new:
            new = new[:new.index(stop_id) + 1]
        outs.append(row[:len(prompts[0])] + new)
    return outs


@torch.no_grad()
def greedy_acceptance(model, mtp, sequences, prompt_len, device, autocast):
    """On the model's own greedy continuations: how often the MTP draft for position j+2 (from row j) equals the
    token greedy decoding put there - the acceptance rate of one drafted token per step."""
    hits = total = 0
    for seq in sequences:
        if len(seq) < prompt_len + 3:
            continue
        w = torch.tensor([seq + [0]], device=device)  # forward() drops the last id as input
        with autocast():
            _, mtp_logits = forward(model, mtp, w, fast=False)
        drafts = mtp_logits[0].argmax(-1)  # row j drafts id j+2
        rows = range(prompt_len - 1, len(seq) - 2)
        hits += sum(int(drafts[j].item() == seq[j + 2]) for j in rows)
        total += len(rows)
    return hits / max(total, 1)
