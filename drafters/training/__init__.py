"""Training code shared by the trained drafters: ShareGPT prompts, self-distillation data, caches."""
