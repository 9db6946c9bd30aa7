"""Makes the LoRA fixtures with peft itself and their golden logits (run once, commit the output).

    /work/refenv/bin/python tests/reference/make_lora_goldens.py

Needs torch and transformers (requirements-golden.txt) plus peft (made with torch 2.15,
transformers 5.23, peft 0.21.2); CI reads the committed files.
For each adapter below it builds a peft LoraConfig on a tiny model of tests/data/models, gives
every lora_A and lora_B random non-zero values (peft initialises B to zero, which would make the
adapter a no-op and the test blind), writes the adapter with peft's save_pretrained (the
directory IS the fixture: peft's own file names, tensor names and adapter_config.json), reloads
it with PeftModel.from_pretrained and writes

    tests/data/lora/<adapter>/                    the adapter as peft saved it
    tests/data/lora/<adapter>.npy                 float32 logits [n_ids, vocab] through PeftModel
    tests/data/lora/<adapter>.json                {"model", "adapter", "ids", "max_abs_vs_base"}

The base runs in float32, eager attention; max_abs_vs_base (how far the adapter moves the logits
from the base model's) shows the adapter matters. Adapters:
  llama3_all   tiny_llama3 (GQA), r=4 alpha=8, all seven projections, f32 tensors
  llama3_qv    tiny_llama3, r=4 alpha=8, q_proj and v_proj only, stored as bf16 (the load path of
               a half-precision adapter; the golden uses the bf16-rounded values)
  qwen2_all    tiny_qwen2 (q/k/v biases, untied head), r=4 alpha=8, all seven, stored as f16
"""

import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from make_hf_goldens import make_ids  # noqa: E402

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTERS = [
    # name, model, targets, stored dtype, seed
    ("llama3_all", "tiny_llama3", ALL, "float32", 11),
    ("llama3_qv", "tiny_llama3", ["q_proj", "v_proj"], "bfloat16", 12),
    ("qwen2_all", "tiny_qwen2", ALL, "float16", 13),
]
N_IDS = 16


def main():
    import torch
    import transformers
    import peft
    from safetensors.torch import load_file, save_file

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    out_root = os.path.join(REPO, "tests", "data", "lora")
    os.makedirs(out_root, exist_ok=True)
    for m_index, (name, model_name, targets, dtype, seed) in enumerate(ADAPTERS):
        model_rel = os.path.join("tests", "data", "models", model_name)
        model_dir = os.path.join(REPO, model_rel)
        base = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager")
        base.eval()
        vocab = base.config.vocab_size
        ids = make_ids(vocab, N_IDS, seed=1000 + m_index)
        with torch.no_grad():
            base_logits = base(torch.tensor([ids]), use_cache=False).logits[0].numpy()

        config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets,
                                 bias="none", task_type="CAUSAL_LM")
        model = peft.get_peft_model(base, config)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_A" in pname:
                    bound = 1.0 / np.sqrt(p.shape[1])
                    p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
                elif "lora_B" in pname:
                    # Large enough that every targeted projection visibly moves the logits.
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
                else:
                    continue
                # Stored in half precision: the golden must use exactly the stored values.
                p.copy_(p.to(getattr(torch, dtype)).to(torch.float32))
        adapter_dir = os.path.join(out_root, name)
        shutil.rmtree(adapter_dir, ignore_errors=True)
        model.save_pretrained(adapter_dir)
        # peft records the path the base was loaded from; keep it repository-relative.
        cfg_path = os.path.join(adapter_dir, "adapter_config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["base_model_name_or_path"] = model_rel
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        weights = os.path.join(adapter_dir, "adapter_model.safetensors")
        if dtype != "float32":
            tensors = {k: v.to(getattr(torch, dtype)) for k, v in load_file(weights).items()}
            save_file(tensors, weights, metadata={"format": "pt"})
        readme = os.path.join(adapter_dir, "README.md")
        if os.path.exists(readme):
            os.remove(readme)  # peft's model card template: large and says nothing here

        # The golden comes from the saved directory, read back by peft.
        fresh = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager")
        loaded = peft.PeftModel.from_pretrained(fresh, adapter_dir, torch_dtype=torch.float32)
        loaded.eval()
        for pname, p in loaded.named_parameters():
            if "lora_" in pname:
                assert p.dtype == torch.float32, (pname, p.dtype)
        with torch.no_grad():
            logits = loaded(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        moved = float(np.abs(logits - base_logits).max())
        assert moved > 0.5, f"{name}: the adapter barely moves the logits ({moved})"
        np.save(os.path.join(out_root, f"{name}.npy"), logits.astype(np.float32))
        with open(os.path.join(out_root, f"{name}.json"), "w") as f:
            json.dump({"model": model_rel, "adapter": f"tests/data/lora/{name}", "ids": ids,
                       "max_abs_vs_base": moved}, f)
            f.write("\n")
        print(f"{name}: {len(ids)} ids, logits moved by up to {moved:.3f} from the base")


if __name__ == "__main__":
    main()
