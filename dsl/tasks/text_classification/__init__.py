"""Text classification: a text in, one class out (CSV or a folder per class; TextCNN, BiLSTM, embedding bag)."""
