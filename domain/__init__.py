"""ctxledger's pure core: the model, the events and the policies (no I/O, no clock)."""
