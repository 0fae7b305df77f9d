"""Corpus text -> tokenizer -> token ids on disk -> random training windows."""
