"""The outer loop: RL-training the trainer agent with tinker-cookbook's loop (hosted Tinker or local)."""
