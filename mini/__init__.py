"""The shipped mini model: a LlamaGen-style VQ tokenizer, class-conditional GPT, drafters and an
evaluator, all trained on Fashion-MNIST so that every analysis runs on a real visual AR model."""
