"""The workload: what a target sends, beside the measuring core.

- hidden.py: the hidden states a codec plan's bodies are windows of (synthetic, or a
  .safetensors/.npy file of a real model's);
- stream.py: the streamed forward's schedule (each aux tap's ready time, the forward's end)
  and its wire model.

The core takes these through its Protocols (hopbench.core.inputs.HiddenSource, Schedule) and
never imports this room; the orchestration builds them from the run's options."""
