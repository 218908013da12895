"""Read models of ctxledger: pure folds ``evolve(state, event) -> state`` over the ledger."""
