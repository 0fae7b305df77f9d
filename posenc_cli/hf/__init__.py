"""Interchange with the Hugging Face stack: posenc RoPE runs as transformers checkpoints
(Llama, or Phi-3 for partial rotary) and Llama-family checkpoints as posenc runs."""
