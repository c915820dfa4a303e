"""The proxy's forward (hopbench.models.proxy) against an independent reference:
transformers' LlamaForCausalLM, loaded by transformers' own GGUF reader from the same file
(it un-permutes Q/K and uses its own rotary embedding). Needs transformers and accelerate
(not hopbench dependencies): pip install transformers accelerate.
Prints the largest logit and tap differences and the argmax agreement."""
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from hopbench.models import proxy as X

p = X.shipped_path()
t=time.time()
hf = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, torch_dtype=torch.float32)
print("hf load", time.time()-t)
m = X.Model(p)
ids = m.tokenizer.encode("The capital of France is Paris. The quick brown fox jumps over the lazy dog.")
with torch.no_grad():
    out = hf(torch.tensor([ids]), output_hidden_states=True)
ref = out.logits[0].numpy()
mine = m.continue_from(0, m.embed[np.asarray(ids)])
print("max abs logits diff", np.abs(ref - mine).max(), "scale", np.abs(ref).max(),
      "argmax agree", np.mean(ref.argmax(-1) == mine.argmax(-1)))
taps = m.taps(ids, [3, 15])
for k in (3, 15):
    h = out.hidden_states[k][0].numpy()
    print(k, "tap diff", np.abs(h - taps[k]).max(), np.abs(h).max())
