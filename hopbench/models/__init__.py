"""The models wing: what a speculative-decoding lab runs, beside the hop benchmark.

- drafter.py: the drafter model (torch; DSpark, EAGLE-3 and tiny shapes, CUDA graphs,
  weights from safetensors), what `hopbench serve --drafter` runs on each cycle's rows;
- streamed.py: one streamed cycle's drafter work, started on the taps that have landed;
- proxy.py: the codec-agreement proxy (a GGUF llama forward in numpy with its tokenizer).

The measuring core never imports this wing: it declares what it takes from a model as
Protocols (hopbench.core.inputs.DraftModel) and the server is handed one. The wing imports
only the shared floor (hopbench.errors), numpy and, lazily, torch."""
