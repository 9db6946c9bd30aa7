"""Writes the LoRA training goldens of tests/unit/test_lora_trainer.cc (PyTorch + peft reference).

    /work/refenv/bin/python tests/reference/make_train_goldens.py [--out-dir tests/data/train]

Needs torch, transformers and peft (CI has none: the outputs are committed, about 250 KB). For
each case, on a committed tiny model of tests/data/models, with eager attention. The reference
runs in float64 (the model's bf16/f16 weights and the f32 adapter convert exactly), so the
goldens are the exact answer to f32 storage precision and the C++ side's error is its own:

  <case>/adapter/            a fixed LoRA adapter with nonzero A and B, written by peft's
                             save_pretrained (also the "peft-made adapter" fixture)
  <case>/batch.json          2 right-padded rows (ids, lengths, shifted targets with -100 on a
                             prompt prefix, the last real token and padding), the summed token
                             cross-entropy `loss_sum` and `tokens`; for cases with `steps`: the
                             AdamW settings and the global gradient norms before clipping
  <case>/grads.safetensors   d(loss_sum)/d(every lora_A / lora_B), dropout 0, by peft tensor name
                             (llama3 also: the relative loss error and the relative L2
                             gradient error of torch.autocast bf16 against float64, the bound
                             for Sampan's bf16 precision)
  <case>/after_steps.safetensors  (llama3 only) the adapter after 3 steps of
                             torch.optim.AdamW(weight_decay) on loss_sum / tokens with
                             clip_grad_norm_ (max_norm below the first norm, so clipping acts),
                             in float64
  adamw.json                 torch.optim.AdamW + clip_grad_norm_ in float32 on two small random
                             tensors over 3 steps (given gradients): the optimizer alone, where
                             Sampan must agree to f32 rounding
"""

import argparse
import json
import os

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "data", "models")

CASES = [
    # name, model, rank, alpha, targets, optimizer steps
    ("tiny_llama3", "tiny_llama3", 3, 8.0,
     ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 3),
    ("tiny_qwen2", "tiny_qwen2", 2, 5.0, ["q_proj", "k_proj", "v_proj", "o_proj"], 0),
    ("tiny_mistral", "tiny_mistral", 2, 3.0, ["q_proj", "v_proj", "down_proj"], 0),
]
SEQ_LEN = 11
LENGTHS = [11, 7]
PROMPT = [3, 0]  # targets ignored for the first PROMPT[b] rows of sequence b


def make_batch(vocab, gen):
    ids = torch.randint(3, vocab, (2, SEQ_LEN), generator=gen)
    targets = torch.full((2, SEQ_LEN), -100, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        ids[b, n:] = 0  # padding id
        for t in range(PROMPT[b], n - 1):
            targets[b, t] = ids[b, t + 1]
    mask = torch.zeros((2, SEQ_LEN), dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    return ids, targets, mask


def lora_params(model):
    """(peft file name, parameter) for every LoRA matrix, in a fixed order."""
    out = []
    for name, p in model.named_parameters():
        if "lora_" in name:
            out.append((name.replace(".default", ""), p))
    return out


def loss_sum(model, ids, targets, mask):
    logits = model(input_ids=ids, attention_mask=mask).logits
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100,
        reduction="sum")


def bf16_autocast_errors(model_dir, case_dir, ids, tgt, mask, ref_params, ref_loss):
    """How far PyTorch's own bf16 mixed precision (torch.autocast on the CPU, the saved adapter,
    f32 master weights) lands from the float64 loss and gradients: the yardstick for Sampan's
    kBf16 training precision."""
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                attn_implementation="eager")
    model = PeftModel.from_pretrained(base, os.path.join(case_dir, "adapter"), is_trainable=True)
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits
    loss = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100,
        reduction="sum")
    loss.backward()
    ref = ref_params
    d2 = r2 = 0.0
    for n, p in lora_params(model):
        d2 += float(((p.grad.double() - ref[n]) ** 2).sum())
        r2 += float((ref[n] ** 2).sum())
    return {"bf16_autocast_loss_error": abs(float(loss.detach()) - ref_loss) / ref_loss,
            "bf16_autocast_grad_error": (d2 / r2) ** 0.5}


def run_case(out_dir, name, model_name, rank, alpha, targets, steps):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    base = AutoModelForCausalLM.from_pretrained(
        os.path.join(MODELS, model_name), dtype=torch.float32, attn_implementation="eager")
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    model.eval()  # dropout 0 anyway; eval keeps transformers' own dropouts off
    params = lora_params(model)
    with torch.no_grad():
        for pname, p in params:
            # Nonzero A and B of the size peft's init would give, so every gradient is nonzero.
            std = 1.0 / p.shape[1] ** 0.5
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    model.save_pretrained(os.path.join(case_dir, "adapter"))  # f32, as Sampan loads it
    model.double()
    readme = os.path.join(case_dir, "adapter", "README.md")  # peft's model card: not needed
    if os.path.exists(readme):
        os.remove(readme)
    # A repository-relative base path instead of this machine's absolute one.
    cfg_path = os.path.join(case_dir, "adapter", "adapter_config.json")
    with open(cfg_path) as f:
        adapter_cfg = json.load(f)
    adapter_cfg["base_model_name_or_path"] = f"tests/data/models/{model_name}"
    # peft keeps target_modules as a set: sorted, the file is the same on every run.
    adapter_cfg["target_modules"] = sorted(adapter_cfg["target_modules"])
    with open(cfg_path, "w") as f:
        json.dump(adapter_cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    ids, tgt, mask = make_batch(base.config.vocab_size, gen)
    tokens = int((tgt != -100).sum())
    loss = loss_sum(model, ids, tgt, mask)
    model.zero_grad()
    loss.backward()
    save_file({n: p.grad.detach().float().contiguous() for n, p in params},
              os.path.join(case_dir, "grads.safetensors"))
    info = {}
    if steps > 0:
        info.update(bf16_autocast_errors(
            os.path.join(MODELS, model_name), case_dir, ids, tgt, mask,
            {n: p.grad.detach().clone() for n, p in params}, float(loss.detach())))
    info.update({
        "seq_len": SEQ_LEN, "lengths": LENGTHS,
        "ids": ids.reshape(-1).tolist(), "targets": tgt.reshape(-1).tolist(),
        "loss_sum": float(loss.detach()), "tokens": tokens,
    })
    if steps > 0:
        # lr 1e-3: at 1e-2 this steep tiny model amplifies a gradient error 20-fold in 3 steps
        # (measured with torch itself), which would test conditioning, not the optimizer.
        lr, wd, b1, b2, eps = 1e-3, 0.1, 0.9, 0.999, 1e-8
        first_norm = float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad / tokens) for _, p in params])))
        max_norm = round(0.5 * first_norm, 6)
        opt = torch.optim.AdamW([p for _, p in params], lr=lr, betas=(b1, b2), eps=eps,
                                weight_decay=wd, foreach=False)
        norms = []
        for _ in range(steps):
            opt.zero_grad()
            (loss_sum(model, ids, tgt, mask) / tokens).backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_([p for _, p in params], max_norm)))
            opt.step()
        save_file({n: p.detach().float().contiguous() for n, p in params},
                  os.path.join(case_dir, "after_steps.safetensors"))
        info.update({"steps": steps, "lr": lr, "weight_decay": wd, "beta1": b1, "beta2": b2,
                     "eps": eps, "max_grad_norm": max_norm, "grad_norms": norms})
    with open(os.path.join(case_dir, "batch.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"{name}: loss_sum {float(loss.detach()):.6f} over {tokens} tokens, {len(params)} LoRA tensors")


def adamw_trace(out_dir):
    """torch.optim.AdamW + clip_grad_norm_ alone, float32, on given gradients."""
    gen = torch.Generator().manual_seed(77)
    shapes = [(5, 7), (13,)]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    init = [p.detach().clone() for p in params]
    lr, wd, max_norm = 3e-2, 0.2, 2.5
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.8, 0.99), eps=1e-6, weight_decay=wd,
                            foreach=False)
    grads, norms = [], []
    for step in range(3):
        # Step 2's gradients are small, so clipping acts on steps 1 and 3 only.
        scale = [3.0, 0.1, 5.0][step]
        g = [torch.randn(s, generator=gen) * scale for s in shapes]
        grads.append([x.reshape(-1).tolist() for x in g])
        for p, x in zip(params, g):
            p.grad = x.clone()
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
        opt.step()
    info = {"lr": lr, "weight_decay": wd, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
            "max_grad_norm": max_norm, "init": [p.reshape(-1).tolist() for p in init],
            "grads": grads, "grad_norms": norms,
            "final": [p.detach().reshape(-1).tolist() for p in params]}
    with open(os.path.join(out_dir, "adamw.json"), "w") as f:
        json.dump(info, f)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(HERE, "..", "data", "train"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    adamw_trace(args.out_dir)
    for case in CASES:
        run_case(args.out_dir, *case)


if __name__ == "__main__":
    main()
